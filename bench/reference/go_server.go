// The HTTP experiment's reference point: the same server as bench/http_server.ts, in Go with os/exec.
// `GET /echo` runs `echo hi`, `GET /cat` runs `cat` on the file named by BENCH_CAT_FILE; prints
// "listening <port>" once ready. bench/http.mjs builds and runs it when `go` is on PATH.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
)

func main() {
	catFile := os.Getenv("BENCH_CAT_FILE")
	if catFile == "" {
		catFile = "/etc/hostname"
	}
	commands := map[string][]string{"/echo": {"echo", "hi"}, "/cat": {"cat", catFile}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		command, ok := commands[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		out, err := exec.Command(command[0], command[1:]...).Output()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(out)
	})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Printf("listening %d\n", listener.Addr().(*net.TCPAddr).Port)
	panic(http.Serve(listener, handler))
}
