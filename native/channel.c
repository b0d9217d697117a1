/*
 * The channel to the host: frames out are appended to one buffer and written together once per loop turn. And the
 * unix channel's bootstrap, which connects it.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "json.h"

struct watch channel = {-1, W_CHANNEL, 0, 0, NULL};

/*
 * What waits to go out, in order, as segments: ranges of `out` (where frames are built), and buffers handed over whole
 * (send_owned: a buffered command's collected output, which goes out from where it was read, not copied into `out`).
 * flush_out writes them with one writev.
 */
struct segment {
  struct buf owned; /* a buffer handed over; data NULL: the range [start, end) of `out` */
  size_t start, end;
};
static struct buf out;
static struct segment *segments;
static size_t seg_head, seg_count, seg_cap;
static size_t pending; /* bytes in the segments not written yet */

static struct segment *seg_at(size_t i) { return &segments[seg_head + i]; }

static struct segment *seg_push(void) {
  if (seg_head + seg_count == seg_cap) {
    if (seg_head > 0) {
      memmove(segments, segments + seg_head, seg_count * sizeof *segments);
      seg_head = 0;
    } else {
      seg_cap = seg_cap ? seg_cap * 2 : 16;
      segments = xrealloc(segments, seg_cap * sizeof *segments);
    }
  }
  struct segment *s = &segments[seg_head + seg_count++];
  memset(s, 0, sizeof *s);
  return s;
}

uint8_t *frame_begin(size_t max_payload) {
  buf_reserve(&out, HEADER_BYTES + max_payload);
  return out.data + out.len + HEADER_BYTES;
}

/* Counts `bytes` appended to `out` as going out, in the last segment when it is `out`'s and ends where they begin. */
static void out_appended(size_t bytes) {
  struct segment *last = seg_count ? seg_at(seg_count - 1) : NULL;
  if (last == NULL || last->owned.data != NULL || last->end != out.len) {
    last = seg_push();
    last->start = last->end = out.len;
  }
  out.len += bytes;
  last->end = out.len;
  pending += bytes;
}

/* A frame's header at the end of `out`; `length` is its whole payload's, `in_place` the part of it built after it. */
static void put_header(uint8_t type, uint32_t id, size_t length, size_t in_place) {
  uint8_t *head = out.data + out.len;
  put_u32(head, (uint32_t)length);
  head[4] = type;
  put_u32(head + 5, id);
  out_appended(HEADER_BYTES + in_place);
}

void frame_end(uint8_t type, uint32_t id, size_t length) { put_header(type, id, length, length); }

void frame_end_partial(uint8_t type, uint32_t id, size_t length, size_t in_place) {
  put_header(type, id, length, in_place);
}

void send_frame(uint8_t type, uint32_t id, const void *payload, size_t length) {
  uint8_t *p = frame_begin(length);
  if (length) memcpy(p, payload, length);
  frame_end(type, id, length);
}

/* Outputs smaller than this are copied into `out` by send_owned: a segment of their own is not worth it. */
#define OWNED_MIN_BYTES (16 * 1024)

void send_owned(struct buf *b) {
  if (b->len == 0) return;
  if (b->len < OWNED_MIN_BYTES) {
    buf_reserve(&out, b->len);
    memcpy(out.data + out.len, b->data, b->len);
    out_appended(b->len);
    b->len = 0;
    return;
  }
  struct segment *s = seg_push();
  s->owned = *b;
  s->start = 0;
  s->end = b->len;
  pending += b->len;
  memset(b, 0, sizeof *b);
}

/*
 * Buffered output has no window of the host's: reading it stops while more than OUT_HIGH_BYTES wait to go out on
 * the channel, and resumes once less than OUT_LOW_BYTES do, so a host that does not read cannot grow the worker.
 */
#define OUT_HIGH_BYTES (4 * 1024 * 1024)
#define OUT_LOW_BYTES (1024 * 1024)
bool output_held;

#define MAX_IOV 64

/* Drops `n` written bytes from the front of the segments, giving handed-over buffers back (buf_release). */
static void consume(size_t n) {
  pending -= n;
  while (seg_count > 0) {
    struct segment *s = seg_at(0);
    size_t left = s->end - s->start;
    if (n < left) {
      s->start += n;
      return;
    }
    n -= left;
    if (s->owned.data != NULL) buf_release(&s->owned);
    seg_head++;
    seg_count--;
    if (n == 0) break;
  }
  if (seg_count == 0) seg_head = 0;
}

/* Writes what is pending; waits for the socket (WANT_OUT) when it is full. A broken channel stops the worker. */
void flush_out(void) {
  while (pending > 0) {
    struct iovec iov[MAX_IOV];
    int count = 0;
    for (size_t i = 0; i < seg_count && count < MAX_IOV; i++) {
      struct segment *s = seg_at(i);
      uint8_t *base = s->owned.data != NULL ? s->owned.data : out.data;
      iov[count].iov_base = base + s->start;
      iov[count++].iov_len = s->end - s->start;
    }
    ssize_t n = writev(channel.fd, iov, count);
    if (n > 0) {
      consume((size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    stop(0); /* the host went away */
  }
  /* `out`'s bytes before its first segment still to go are written: let them go (or the whole buffer, when done). */
  size_t first = out.len;
  for (size_t i = 0; i < seg_count; i++) {
    if (seg_at(i)->owned.data == NULL) {
      first = seg_at(i)->start;
      break;
    }
  }
  if (first == out.len) {
    out.len = 0;
    if (out.cap > 4 * MAX_CHUNK_BYTES) buf_free(&out); /* let a burst's memory go */
  } else if (first > out.len / 2) {
    memmove(out.data, out.data + first, out.len - first);
    out.len -= first;
    for (size_t i = 0; i < seg_count; i++) {
      struct segment *s = seg_at(i);
      if (s->owned.data == NULL) {
        s->start -= first;
        s->end -= first;
      }
    }
  }
  watch_set(&channel, pending > 0 ? WANT_IN | WANT_OUT : WANT_IN);
  if (!output_held && pending > OUT_HIGH_BYTES) hold_buffered_output(true);
  else if (output_held && pending < OUT_LOW_BYTES) hold_buffered_output(false);
}

/*
 * The channel's send buffer, asked for once: a 163 KB output then goes out in one write rather than a socket's default
 * (about 208 KB, shared by every frame queued) filling and waking the worker again when it drains. The kernel caps it
 * at net.core.wmem_max; a refusal leaves the default.
 */
#define CHANNEL_SNDBUF_BYTES (1024 * 1024)

void channel_tune(int fd) {
  int size = CHANNEL_SNDBUF_BYTES;
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

/* What is still pending goes out in one last write, as much of it as the socket takes: the worker is stopping. */
void flush_out_at_exit(void) {
  if (channel.fd < 0) return;
  for (size_t i = 0; i < seg_count; i++) {
    struct segment *s = seg_at(i);
    uint8_t *base = s->owned.data != NULL ? s->owned.data : out.data;
    if (write(channel.fd, base + s->start, s->end - s->start) != (ssize_t)(s->end - s->start)) return;
  }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The unix channel's bootstrap */

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static bool write_all(int fd, const uint8_t *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

/*
 * The unix channel (adapters/_unix_handshake.ts): SPAWNPOOL_BOOTSTRAP, {"path": ..., "secret": <hex>}, names the
 * socket (an abstract one when it starts with NUL, its exact length) and the secret presented before any frame. The
 * variable is taken out of the environment first: no command inherits it.
 */
/* Connects tried at most, a full backlog's worth (adapters/_unix_handshake.ts CONNECT_TRIES). */
#define CONNECT_TRIES 20

int connect_from_bootstrap(void) {
  char line[4096];
  const char *value = getenv("SPAWNPOOL_BOOTSTRAP");
  size_t value_len = value == NULL ? 0 : strlen(value);
  if (value_len < sizeof line) memcpy(line, value == NULL ? "" : value, value_len + 1);
  unsetenv("SPAWNPOOL_BOOTSTRAP");
  if (value == NULL || value_len >= sizeof line) {
    fprintf(stderr, "spawnpool worker: SPAWNPOOL_BOOTSTRAP is %s\n", value == NULL ? "not set" : "too long");
    return -1;
  }
  struct json_doc doc;
  if (!json_parse(&doc, (const uint8_t *)line, value_len) || doc.nodes[0].type != JSON_OBJECT) {
    fprintf(stderr, "spawnpool worker: malformed SPAWNPOOL_BOOTSTRAP\n");
    return -1;
  }
  const struct json_node *path = json_get(&doc, &doc.nodes[0], "path");
  const struct json_node *secret = json_get(&doc, &doc.nodes[0], "secret");
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  uint8_t key[SECRET_BYTES * 4];
  size_t key_len = 0;
  bool ok = path != NULL && secret != NULL && path->type == JSON_STRING && secret->type == JSON_STRING &&
            path->str_len > 0 && path->str_len < sizeof addr.sun_path && secret->str_len % 2 == 0 &&
            secret->str_len > 0 && secret->str_len / 2 <= sizeof key;
  for (size_t i = 0; ok && i < secret->str_len; i += 2) {
    int hi = hex_digit(json_str(&doc, secret)[i]), lo = hex_digit(json_str(&doc, secret)[i + 1]);
    ok = hi >= 0 && lo >= 0;
    key[key_len++] = (uint8_t)(hi * 16 + lo);
  }
  socklen_t addr_len = 0;
  if (ok) {
    memcpy(addr.sun_path, json_str(&doc, path), path->str_len);
    bool abstract = addr.sun_path[0] == '\0';
    addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path->str_len + (abstract ? 0 : 1));
  }
  json_free(&doc);
  if (!ok) {
    fprintf(stderr, "spawnpool worker: malformed SPAWNPOOL_BOOTSTRAP\n");
    return -1;
  }
#ifdef SOCK_CLOEXEC
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
#else
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
#endif
  /* A full backlog (EAGAIN, as under a flood of connections to an abstract name) or a signal: try again, backing off. */
  int connected = -1;
  for (int attempt = 1; fd >= 0 && attempt <= CONNECT_TRIES; attempt++) {
    connected = connect(fd, (struct sockaddr *)&addr, addr_len);
    if (connected == 0 || (errno != EAGAIN && errno != EINTR)) break;
    usleep((useconds_t)(attempt < 20 ? attempt : 20) * 5000);
  }
  if (fd < 0 || connected != 0 || !write_all(fd, key, key_len)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}
