// The HTTP experiment's reference point in Rust: the same server as bench/reference/go_server.go, on tokio's
// multi-threaded runtime (one thread per core) and hyper's HTTP/1 server. `GET /echo` runs `echo hi`, `GET /cat`
// runs `cat` on the file named by BENCH_CAT_FILE (tokio::process, stdout piped, stdin and stderr null); prints
// "listening <port>" once ready. bench/http.mjs builds and runs it when `cargo` is on PATH.
use std::convert::Infallible;
use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{header, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::process::Command;

async fn respond(
    cat_file: Arc<String>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (cmd, args): (&str, Vec<&str>) = match req.uri().path() {
        "/echo" => ("echo", vec!["hi"]),
        "/cat" => ("cat", vec![cat_file.as_str()]),
        _ => return Ok(status(StatusCode::NOT_FOUND, "not found".into())),
    };
    let output = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .await;
    Ok(match output {
        Ok(out) => Response::builder()
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(Bytes::from(out.stdout)))
            .unwrap(),
        Err(error) => status(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    })
}

fn status(code: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = code;
    response
}

#[tokio::main]
async fn main() {
    let cat_file =
        Arc::new(std::env::var("BENCH_CAT_FILE").unwrap_or_else(|_| "/etc/hostname".into()));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    println!(
        "listening {}",
        listener.local_addr().expect("address").port()
    );
    std::io::stdout().flush().expect("stdout");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let cat_file = cat_file.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| respond(cat_file.clone(), req));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
