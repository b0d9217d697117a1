/* Frames from the host: the incremental decoder of the channel's bytes, and each frame's handling. */
#include "worker.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"

static void protocol_error(const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  fprintf(stderr, "spawnpool worker: ");
  vfprintf(stderr, format, ap);
  fprintf(stderr, "; closing\n");
  va_end(ap);
  stop(1);
}

static bool is_mode(const struct json_node *n, const struct json_doc *doc) {
  if (n == NULL || n->type != JSON_STRING) return false;
  const char *s = json_str(doc, n);
  return strcmp(s, "piped") == 0 || strcmp(s, "inherit") == 0 || strcmp(s, "null") == 0;
}

static bool is_count(const struct json_node *n) {
  return n != NULL && n->type == JSON_NUMBER && isfinite(n->number) && n->number >= 0;
}

static bool is_integer(const struct json_node *n) {
  return n != NULL && n->type == JSON_NUMBER && isfinite(n->number) && trunc(n->number) == n->number;
}

static bool is_bool(const struct json_node *n) {
  return n != NULL && (n->type == JSON_TRUE || n->type == JSON_FALSE);
}

/* Which limit a name is (LIMIT_NAMES), or -1. */
static int limit_index(const char *name, size_t len) {
  for (int i = 0; i < LIMIT_COUNT; i++) {
    if (strlen(LIMIT_NAMES[i]) == len && memcmp(LIMIT_NAMES[i], name, len) == 0) return i;
  }
  return -1;
}

/* A request's limits: an object of known names, each a non-negative integer below 2^53 (a JSON number's). */
static bool valid_limits(const struct json_doc *doc, const struct json_node *limits) {
  if (limits->type != JSON_OBJECT) return false;
  for (const struct json_node *l = json_first(doc, limits); l; l = json_next(doc, l)) {
    if (limit_index(json_key(doc, l), l->key_len) < 0 || l->key_has_nul) return false;
    if (!is_integer(l) || l->number < 0 || l->number > 9007199254740991.0) return false;
  }
  return true;
}

/* A terminal's size: an integer from 1 to 65535. */
static bool is_terminal_size(const struct json_node *n) {
  return is_integer(n) && n->number >= 1 && n->number <= 65535;
}

/*
 * A request's terminal: { cols, rows, raw? } and no other member, on a command whose output is the terminal's (stdout
 * "piped", stderr "null") and that is not detached (its session is the terminal's).
 */
static bool valid_terminal(const struct json_doc *doc, const struct json_node *terminal) {
  const struct json_node *root = &doc->nodes[0], *n;
  if (terminal->type != JSON_OBJECT) return false;
  for (const struct json_node *m = json_first(doc, terminal); m; m = json_next(doc, m)) {
    const char *key = json_key(doc, m);
    bool known = !m->key_has_nul && (strcmp(key, "cols") == 0 || strcmp(key, "rows") == 0 || strcmp(key, "raw") == 0);
    if (!known) return false;
  }
  if (!is_terminal_size(json_get(doc, terminal, "cols")) || !is_terminal_size(json_get(doc, terminal, "rows"))) {
    return false;
  }
  if ((n = json_get(doc, terminal, "raw")) != NULL && !is_bool(n)) return false;
  if (strcmp(json_str(doc, json_get(doc, root, "stdout")), "piped") != 0) return false;
  if (strcmp(json_str(doc, json_get(doc, root, "stderr")), "null") != 0) return false;
  return (n = json_get(doc, root, "detached")) == NULL || n->type != JSON_TRUE;
}

/* Validates a spawn request exactly as parseRequest in core/request_check.ts does (tests/wire_schema_test.ts). */
static bool valid_request(const struct json_doc *doc) {
  const struct json_node *root = &doc->nodes[0];
  const struct json_node *n;
#define GET(name) json_get(doc, root, name)
  if ((n = GET("cmd")) == NULL || n->type != JSON_STRING) return false;
  if ((n = GET("args")) == NULL || n->type != JSON_ARRAY) return false;
  for (const struct json_node *a = json_first(doc, n); a; a = json_next(doc, a)) {
    if (a->type != JSON_STRING) return false;
  }
  if ((n = GET("cwd")) != NULL && n->type != JSON_STRING) return false;
  if ((n = GET("env")) != NULL) {
    if (n->type != JSON_OBJECT) return false;
    for (const struct json_node *e = json_first(doc, n); e; e = json_next(doc, e)) {
      if (e->type != JSON_STRING) return false;
    }
  }
  if (!is_mode(GET("stdin"), doc) || !is_mode(GET("stdout"), doc) || !is_mode(GET("stderr"), doc)) return false;
  if (!is_bool(GET("buffered"))) return false;
  if ((n = GET("killSignal")) == NULL || n->type != JSON_STRING) return false;
  if (!is_count(GET("forceKillAfterDelay"))) return false;
  if (!is_count(n = GET("window")) || n->number == 0) return false;
  if ((n = GET("timeout")) != NULL && !is_count(n)) return false;
  if ((n = GET("maxBuffer")) != NULL && !is_count(n)) return false;
  if ((n = GET("argv0")) != NULL && n->type != JSON_STRING) return false;
  if ((n = GET("uid")) != NULL && !is_integer(n)) return false;
  if ((n = GET("gid")) != NULL && !is_integer(n)) return false;
  if ((n = GET("detached")) != NULL && !is_bool(n)) return false;
  if ((n = GET("sockets")) != NULL && !is_bool(n)) return false;
  if (!is_bool(GET("group"))) return false;
  if ((n = GET("killTree")) != NULL && !is_bool(n)) return false;
  if ((n = GET("limits")) != NULL && !valid_limits(doc, n)) return false;
  if ((n = GET("terminal")) != NULL && !valid_terminal(doc, n)) return false;
#undef GET
  return true;
}

/*
 * The most values (JSON nodes) a spawn request can have and still run: each argument or variable costs an exec
 * at least a pointer, and Linux takes at most 6 MiB of them (3/4 of _STK_LIM), whatever ARG_MAX says; a few
 * more for the request's own fields.
 */
static uint32_t max_request_nodes(void) {
  static uint32_t max;
  if (max == 0) {
    long arg_max = sysconf(_SC_ARG_MAX);
    if (arg_max <= 0 || arg_max > 6L * 1024 * 1024) arg_max = 6L * 1024 * 1024;
    max = (uint32_t)((size_t)arg_max / sizeof(char *)) + 1024;
  }
  return max;
}

static void on_spawn(uint32_t id, const uint8_t *payload, size_t len) {
  if (id == 0 || find_job(id) != NULL) protocol_error("Request id %u is already in use", id);
  struct json_doc doc;
  bool too_many;
  if (!json_parse_max(&doc, payload, len, max_request_nodes(), &too_many)) {
    if (!too_many) protocol_error("Frame payload is not valid JSON");
    /* It cannot run, as an exec past the system's limit (E2BIG): it fails alone, not the worker. */
    send_spawn_error(id, NULL, E2BIG, NULL,
                     "Argument list too long: the request has more arguments and variables than an exec can take");
    return;
  }
  if (doc.nodes[0].type != JSON_OBJECT) {
    json_free(&doc);
    protocol_error("Frame payload is not a JSON object");
  }
  if (!valid_request(&doc)) {
    json_free(&doc);
    protocol_error("Spawn request is malformed");
  }
  struct job *job = xrealloc(NULL, sizeof *job);
  memset(job, 0, sizeof *job);
  job->id = id;
  job->leaf = -1;
  const struct json_node *root = &doc.nodes[0];
  const struct json_node *n;
  job->buffered = json_get(&doc, root, "buffered")->type == JSON_TRUE;
  job->detached = (n = json_get(&doc, root, "detached")) != NULL && n->type == JSON_TRUE;
  job->sockets = (n = json_get(&doc, root, "sockets")) != NULL && n->type == JSON_TRUE;
  job->kill_tree = (n = json_get(&doc, root, "killTree")) != NULL && n->type == JSON_TRUE;
  if ((n = json_get(&doc, root, "limits")) != NULL) {
    for (const struct json_node *l = json_first(&doc, n); l; l = json_next(&doc, l)) {
      int i = limit_index(json_key(&doc, l), l->key_len);
      job->limit_set[i] = true;
      job->limit_value[i] = (unsigned long long)l->number;
    }
  }
  job->window = json_get(&doc, root, "window")->number;
  job->force_kill_ms = json_get(&doc, root, "forceKillAfterDelay")->number;
  n = json_get(&doc, root, "killSignal");
  job->kill_signal = signal_number(json_str(&doc, n), n->str_len);
  if ((n = json_get(&doc, root, "timeout")) != NULL) {
    job->has_timeout = true;
    job->timeout_ms = n->number;
  }
  if ((n = json_get(&doc, root, "maxBuffer")) != NULL) {
    job->has_max_buffer = true;
    job->max_buffer = n->number;
  }
  job->w_stdin = (struct watch){-1, W_STDIN, 0, 0, job};
  job->w_out[0] = (struct watch){-1, W_OUTPUT, 0, 0, job};
  for (int fd = 1; fd <= 2; fd++) job->w_out[fd] = (struct watch){-1, W_OUTPUT, (uint8_t)fd, 0, job};
  job->w_exit = (struct watch){-1, W_EXIT, 0, 0, job};
  tree_before_spawn(job);
  start_job(job, &doc);
  json_free(&doc);
  if (job->pid < 0) {
    tree_spawn_failed(job);
    free(job);
    return;
  }
  /* A buffered command without stdin from the host hears nothing from the worker before its end: its Spawned may wait. */
  if (job->buffered && !job->piped[0]) {
    job->spawned_at = now_us() + (job_dies_with_worker(job) ? SPAWNED_HOLD_DIES_WITH_WORKER_US : SPAWNED_HOLD_US);
  }
  else send_spawned(job);
  track_job(job);
  for (int fd = 1; fd <= 2; fd++) {
    job->open[fd] = job->piped[fd];
    if (job->piped[fd] && !(job->buffered && output_held)) watch_set(&job->w_out[fd], WANT_IN);
  }
  if (job->has_timeout) job->timeout_at = deadline_after(job->timeout_ms);
#ifdef SYS_pidfd_open
  if (use_pidfd) {
    job->w_exit.fd = (int)syscall(SYS_pidfd_open, job->pid, 0); /* close-on-exec, always */
    /* Without one (EMFILE), SIGCHLD, always handled, is the backstop (read_signals). */
    if (job->w_exit.fd >= 0) watch_set(&job->w_exit, WANT_IN);
  }
#endif
}

static int decode_fd(const uint8_t *payload, size_t len) {
  if (len < 1 || (payload[0] != 1 && payload[0] != 2)) protocol_error("Frame names no stream");
  return payload[0];
}

/*
 * One frame. `owned` is the payload's own heap buffer when it was assembled from several reads (the handler may
 * keep it, setting *owned to NULL); NULL when the payload is a view of the read buffer.
 */
static void on_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t len, uint8_t **owned) {
  if (type == F_SPAWN) {
    on_spawn(id, payload, len);
    return;
  }
  struct job *job = find_job(id);
  /* Frames for requests that already completed are normal (a kill racing an exit): ignore them. */
  if (job == NULL) {
    if (type < F_SPAWN || type > F_TERMINAL) protocol_error("Unknown frame type %u", type);
    return;
  }
  switch (type) {
  case F_STDIN: {
    uint8_t *data;
    if (owned != NULL && *owned != NULL) {
      data = *owned;
      *owned = NULL;
    } else {
      data = xrealloc(NULL, len);
      if (len) memcpy(data, payload, len);
    }
    queue_stdin(job, data, len);
    return;
  }
  case F_STDIN_END:
    queue_stdin(job, NULL, 0);
    return;
  case F_KILL: {
    /* "SIGTERM": the command; "-SIGTERM": its process group; "*SIGTERM": its whole tree. */
    enum kill_scope scope = len == 0 ? KILL_PID : payload[0] == '-' ? KILL_GROUP : payload[0] == '*' ? KILL_TREE : KILL_PID;
    size_t skip = scope == KILL_PID ? 0 : 1;
    kill_child(job, signal_number((const char *)payload + skip, len - skip), scope);
    return;
  }
  case F_RELEASE: {
    int fd = decode_fd(payload, len);
    if (job->open[fd]) release_stream(job, fd);
    return;
  }
  case F_TERMINAL:
    if (!terminal_control(job, payload, len)) protocol_error("Terminal frame is malformed");
    return;
  case F_CREDIT: {
    int fd = decode_fd(payload, len);
    if (len < 5) protocol_error("Frame payload is too short");
    double acked = job->unacked[fd] - (double)get_u32(payload + 1);
    job->unacked[fd] = acked > 0 ? acked : 0;
    if (job->open[fd]) update_pause(job, fd);
    if (job->exited) arm_grace(job); /* its reader is still there: the quiet period starts again */
    return;
  }
  default:
    protocol_error("Unknown frame type %u", type);
  }
}

/* The incremental frame decoder (core/frame.ts FrameDecoder). */
static struct {
  uint8_t head[HEADER_BYTES];
  size_t head_filled;
  uint8_t *payload; /* a frame split across reads, assembled here */
  size_t payload_len, payload_filled;
  uint8_t type;
  uint32_t id;
} dec;

/* A frame's header, checked before its payload is waited for (and a buffer of up to 64 MiB allocated for it). */
static void check_header(uint32_t length, uint8_t type) {
  if (length > MAX_PAYLOAD_BYTES) {
    protocol_error("Frame of %u bytes exceeds the %u-byte limit", length, MAX_PAYLOAD_BYTES);
  }
  if (type < F_SPAWN || type > F_TERMINAL) protocol_error("Unknown frame type %u", type);
}

static void deliver_assembled(void) {
  uint8_t *owned = dec.payload;
  dec.payload = NULL;
  on_frame(dec.type, dec.id, owned, dec.payload_len, &owned);
  free(owned);
}

static void begin_frame(uint32_t length, uint8_t type, uint32_t id) {
  check_header(length, type);
  if (length == 0) {
    on_frame(type, id, (const uint8_t *)"", 0, NULL);
    return;
  }
  dec.type = type;
  dec.id = id;
  dec.payload = xrealloc(NULL, length);
  dec.payload_len = length;
  dec.payload_filled = 0;
}

static void decode(const uint8_t *chunk, size_t len) {
  size_t off = 0;
  if (dec.head_filled > 0) {
    size_t take = HEADER_BYTES - dec.head_filled;
    if (take > len) take = len;
    memcpy(dec.head + dec.head_filled, chunk, take);
    dec.head_filled += take;
    off = take;
    if (dec.head_filled < HEADER_BYTES) return;
    dec.head_filled = 0;
    begin_frame(get_u32(dec.head), dec.head[4], get_u32(dec.head + 5));
  }
  if (dec.payload != NULL) {
    size_t take = dec.payload_len - dec.payload_filled;
    if (take > len - off) take = len - off;
    memcpy(dec.payload + dec.payload_filled, chunk + off, take);
    dec.payload_filled += take;
    off += take;
    if (dec.payload_filled < dec.payload_len) return;
    deliver_assembled();
  }
  while (len - off >= HEADER_BYTES) {
    uint32_t length = get_u32(chunk + off);
    uint8_t type = chunk[off + 4];
    uint32_t id = get_u32(chunk + off + 5);
    size_t start = off + HEADER_BYTES;
    if ((size_t)length > len - start) {
      begin_frame(length, type, id);
      memcpy(dec.payload, chunk + start, len - start);
      dec.payload_filled = len - start;
      return;
    }
    check_header(length, type);
    on_frame(type, id, chunk + start, length, NULL);
    off = start + length;
  }
  if (off < len) {
    memcpy(dec.head, chunk + off, len - off);
    dec.head_filled = len - off;
  }
}

void read_channel(void) {
  static uint8_t buffer[CHANNEL_READ_BYTES];
  ssize_t n = read(channel.fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) stop(0); /* the host closed the channel, or it broke */
  decode(buffer, (size_t)n);
}
