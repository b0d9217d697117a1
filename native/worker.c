/*
 * spawnpool's native worker: serves a host's spawn requests over the binary frame protocol of core/frame.ts,
 * exactly as worker/serve.ts does for the JavaScript runtimes, from one thread and one event loop (epoll on
 * Linux, poll elsewhere). Started by a host with SPAWNPOOL_CHANNEL=fd3 (a connected socket on fd 3) or
 * SPAWNPOOL_CHANNEL=unix (a bootstrap line on stdin names an abstract unix socket and a one-time secret).
 *
 * Everything the host sends is untrusted: a malformed frame closes the channel and the worker exits 1 after
 * killing its commands, as the JavaScript worker does on a ProtocolError. Every fd the worker opens is
 * close-on-exec, so commands inherit nothing of it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

/* SPAWNPOOL_FORCE_POLL builds, on Linux, what other systems run: poll() and SIGCHLD instead of epoll and pidfd. */
#if defined(__linux__) && !defined(SPAWNPOOL_FORCE_POLL)
#include <sys/epoll.h>
#include <sys/syscall.h>
#define USE_EPOLL 1
#else
#include <poll.h>
#define USE_EPOLL 0
#endif

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
#define HAVE_ADDCHDIR 1
#else
#define HAVE_ADDCHDIR 0
#endif

extern char **environ;

/* The protocol (core/frame.ts). */
#define PROTOCOL_VERSION 3
#define HEADER_BYTES 9
#define MAX_PAYLOAD_BYTES (64u * 1024u * 1024u)
#define SECRET_BYTES 32

enum frame_type {
  F_SPAWN = 1,
  F_STDIN = 2,
  F_STDIN_END = 3,
  F_KILL = 4,
  F_CREDIT = 5,
  F_RELEASE = 6,
  F_HELLO = 16,
  F_SPAWNED = 17,
  F_SPAWN_ERROR = 18,
  F_STDOUT = 19,
  F_STDERR = 20,
  F_STREAM_END = 21,
  F_STDIN_ACK = 22,
  F_EXIT = 23,
  F_EXITED = 24,
};

/* As worker/serve.ts: output frames of at most 1 MiB, and the quiet period that releases a grandchild's streams. */
#define MAX_CHUNK_BYTES (1024 * 1024)
#define STREAM_GRACE_US (200 * 1000)
/* The channel's read buffer (core/adapter.ts LENDING_READ_BYTES) and one read of a buffered command's output. */
#define CHANNEL_READ_BYTES (256 * 1024)
#define OUTPUT_READ_BYTES (64 * 1024)

/* ---------------------------------------------------------------------------------------------------------- */
/* Small helpers */

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * When a timer of `ms` milliseconds fires, as Node's setTimeout (serve.ts's timers) takes it: a delay below 1 or past
 * 2^31 - 1 ms (NaN included) is 1 ms.
 */
static int64_t deadline_after(double ms) {
  if (!(ms >= 1 && ms <= 2147483647.0)) ms = 1;
  return now_us() + (int64_t)(ms * 1000);
}

static void put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void stop(int code);

static void *xrealloc(void *p, size_t size) {
  void *q = realloc(p, size ? size : 1);
  if (q == NULL) {
    fprintf(stderr, "spawnpool worker: out of memory; closing\n");
    stop(1);
  }
  return q;
}

struct buf {
  uint8_t *data;
  size_t len;
  size_t cap;
};

static void buf_reserve(struct buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < extra) cap *= 2;
  b->data = xrealloc(b->data, cap);
  b->cap = cap;
}

static void buf_put(struct buf *b, const void *p, size_t n) {
  buf_reserve(b, n);
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
}

static void buf_free(struct buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Signals and errno names: the names travel on the wire. */

struct named {
  const char *name;
  int value;
};

static const struct named SIGNALS[] = {
  {"SIGHUP", SIGHUP}, {"SIGINT", SIGINT}, {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL}, {"SIGTRAP", SIGTRAP},
  {"SIGABRT", SIGABRT}, {"SIGBUS", SIGBUS}, {"SIGFPE", SIGFPE}, {"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1},
  {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2}, {"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
#ifdef SIGSTKFLT
  {"SIGSTKFLT", SIGSTKFLT},
#endif
  {"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP}, {"SIGTSTP", SIGTSTP}, {"SIGTTIN", SIGTTIN},
  {"SIGTTOU", SIGTTOU}, {"SIGURG", SIGURG}, {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ}, {"SIGVTALRM", SIGVTALRM},
  {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
#ifdef SIGIO
  {"SIGIO", SIGIO},
#endif
#ifdef SIGPWR
  {"SIGPWR", SIGPWR},
#endif
  {"SIGSYS", SIGSYS},
#ifdef SIGIOT
  {"SIGIOT", SIGIOT},
#endif
#ifdef SIGPOLL
  {"SIGPOLL", SIGPOLL},
#endif
#ifdef SIGINFO
  {"SIGINFO", SIGINFO},
#endif
};

/* The number of a signal name, or 0 when unknown (a kill with an unknown name is ignored, as in serve.ts). */
static int signal_number(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++) {
    if (strlen(SIGNALS[i].name) == len && memcmp(SIGNALS[i].name, name, len) == 0) return SIGNALS[i].value;
  }
  return 0;
}

static const char *signal_name(int sig) {
  for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++) {
    if (SIGNALS[i].value == sig) return SIGNALS[i].name;
  }
  return NULL;
}

#define ERRNO(e) {#e, e}
static const struct named ERRNOS[] = {
  ERRNO(E2BIG), ERRNO(EACCES), ERRNO(EAGAIN), ERRNO(EBADF), ERRNO(EBUSY), ERRNO(EEXIST), ERRNO(EFAULT),
  ERRNO(EINVAL), ERRNO(EIO), ERRNO(EISDIR), ERRNO(ELOOP), ERRNO(EMFILE), ERRNO(ENAMETOOLONG), ERRNO(ENFILE),
  ERRNO(ENODEV), ERRNO(ENOENT), ERRNO(ENOEXEC), ERRNO(ENOMEM), ERRNO(ENOSPC), ERRNO(ENOSYS), ERRNO(ENOTDIR),
  ERRNO(ENOTSUP), ERRNO(ENXIO), ERRNO(EPERM), ERRNO(EROFS), ERRNO(ESRCH), ERRNO(ETXTBSY),
#ifdef ELIBBAD
  ERRNO(ELIBBAD),
#endif
};

static const char *errno_name(int err) {
  for (size_t i = 0; i < sizeof ERRNOS / sizeof ERRNOS[0]; i++) {
    if (ERRNOS[i].value == err) return ERRNOS[i].name;
  }
  return "EUNKNOWN";
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Watches: the fds the loop waits on. */

enum watch_kind { W_CHANNEL, W_SIGNALS, W_STDIN, W_OUTPUT, W_EXIT };
enum { WANT_IN = 1, WANT_OUT = 2 };

struct job;

struct watch {
  int fd;
  uint8_t kind;
  uint8_t stream; /* W_OUTPUT: 1 or 2 */
  uint8_t events; /* WANT_IN | WANT_OUT currently registered */
  struct job *job;
};

#if USE_EPOLL
static int epoll_fd = -1;
#endif

static void watch_set(struct watch *w, uint8_t events) {
  if (w->fd < 0 || w->events == events) return;
#if USE_EPOLL
  struct epoll_event ev = {0};
  ev.events = (events & WANT_IN ? EPOLLIN : 0u) | (events & WANT_OUT ? EPOLLOUT : 0u);
  ev.data.ptr = w;
  int op = w->events == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_fd, op, w->fd, &ev) != 0 && op != EPOLL_CTL_DEL) {
    fprintf(stderr, "spawnpool worker: epoll_ctl: %s; closing\n", strerror(errno));
    stop(1);
  }
#endif
  w->events = events;
}

static void watch_close(struct watch *w) {
  if (w->fd < 0) return;
  watch_set(w, 0);
  close(w->fd);
  w->fd = -1;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The channel to the host: frames out are appended to one buffer and written together once per loop turn. */

static struct watch channel = {-1, W_CHANNEL, 0, 0, NULL};
static struct buf out;
static size_t out_sent;

static uint8_t *frame_begin(size_t max_payload) {
  buf_reserve(&out, HEADER_BYTES + max_payload);
  return out.data + out.len + HEADER_BYTES;
}

static void frame_end(uint8_t type, uint32_t id, size_t length) {
  uint8_t *head = out.data + out.len;
  put_u32(head, (uint32_t)length);
  head[4] = type;
  put_u32(head + 5, id);
  out.len += HEADER_BYTES + length;
}

static void send_frame(uint8_t type, uint32_t id, const void *payload, size_t length) {
  uint8_t *p = frame_begin(length);
  if (length) memcpy(p, payload, length);
  frame_end(type, id, length);
}

static void hold_buffered_output(bool hold);

/*
 * Buffered output has no window of the host's: reading it stops while more than OUT_HIGH_BYTES wait to go out on
 * the channel, and resumes once less than OUT_LOW_BYTES do, so a host that does not read cannot grow the worker.
 */
#define OUT_HIGH_BYTES (4 * 1024 * 1024)
#define OUT_LOW_BYTES (1024 * 1024)
static bool output_held;

/* Writes what is pending; waits for the socket (WANT_OUT) when it is full. A broken channel stops the worker. */
static void flush_out(void) {
  while (out_sent < out.len) {
    ssize_t n = write(channel.fd, out.data + out_sent, out.len - out_sent);
    if (n > 0) {
      out_sent += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    stop(0); /* the host went away */
  }
  if (out_sent == out.len) {
    out.len = out_sent = 0;
    if (out.cap > 4 * MAX_CHUNK_BYTES) buf_free(&out); /* let a burst's memory go */
  } else if (out_sent > out.len / 2) {
    memmove(out.data, out.data + out_sent, out.len - out_sent);
    out.len -= out_sent;
    out_sent = 0;
  }
  watch_set(&channel, out.len > out_sent ? WANT_IN | WANT_OUT : WANT_IN);
  size_t pending = out.len - out_sent;
  if (!output_held && pending > OUT_HIGH_BYTES) hold_buffered_output(true);
  else if (output_held && pending < OUT_LOW_BYTES) hold_buffered_output(false);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Jobs: one per spawn request. */

struct stdin_op {
  struct stdin_op *next;
  uint8_t *data; /* NULL: close stdin */
  size_t len;
  size_t off;
};

struct job {
  uint32_t id;
  struct job *hash_next;
  struct job *prev, *next; /* every live job, for timers and stop() */
  struct job *grave_next;
  pid_t pid;
  bool buffered, detached, piped[3];
  bool done;   /* Exit sent: the id is free, only stdin may still drain */
  bool exited; /* the child exited: it stays a zombie, unreaped, until the job is done */
  bool reaped; /* its pid (and process group id) may be reused now: nothing more is signalled */
  int code, sig;
  const char *reason;
  int kill_signal;
  double window, force_kill_ms, timeout_ms;
  bool has_timeout, has_max_buffer;
  double max_buffer;
  struct watch w_stdin, w_out[3], w_exit;
  bool open[3], paused[3];
  double unacked[3];
  struct buf collected[3];
  size_t collected_bytes;
  double total_bytes;
  struct stdin_op *stdin_head, *stdin_tail;
  int64_t timeout_at, force_at, grace_at; /* monotonic us; 0: not armed */
};

#define HASH_BUCKETS 1024
static struct job *by_id[HASH_BUCKETS];
static struct job *live; /* list head */
static struct job *graves;
#ifdef SYS_pidfd_open
static bool use_pidfd;
#endif
static int signal_pipe[2] = {-1, -1};
static struct watch signal_watch = {-1, W_SIGNALS, 0, 0, NULL};
static sigset_t default_signals; /* what commands get back to default: whatever this worker ignores */

static struct job *find_job(uint32_t id) {
  for (struct job *j = by_id[id % HASH_BUCKETS]; j != NULL; j = j->hash_next) {
    if (j->id == id) return j;
  }
  return NULL;
}

static void unhash(struct job *job) {
  struct job **slot = &by_id[job->id % HASH_BUCKETS];
  while (*slot != NULL && *slot != job) slot = &(*slot)->hash_next;
  if (*slot == job) *slot = job->hash_next;
}

static void free_stdin_ops(struct job *job) {
  while (job->stdin_head != NULL) {
    struct stdin_op *op = job->stdin_head;
    job->stdin_head = op->next;
    free(op->data);
    free(op);
  }
  job->stdin_tail = NULL;
}

/* Ends a job for good; its memory goes at the end of this loop turn (events for it may still be pending). */
static void bury(struct job *job) {
  watch_close(&job->w_stdin);
  for (int fd = 1; fd <= 2; fd++) watch_close(&job->w_out[fd]);
  watch_close(&job->w_exit);
  free_stdin_ops(job);
  if (job->prev) job->prev->next = job->next;
  else live = job->next;
  if (job->next) job->next->prev = job->prev;
  job->prev = job->next = NULL;
  job->grave_next = graves;
  graves = job;
}

static void free_graves(void) {
  while (graves != NULL) {
    struct job *job = graves;
    graves = job->grave_next;
    for (int fd = 1; fd <= 2; fd++) buf_free(&job->collected[fd]);
    free(job);
  }
}

static void kill_child(struct job *job, int sig, bool group) {
  if (job->exited || sig == 0) return;
  kill(group ? -job->pid : job->pid, sig); /* ESRCH: it is exiting */
}

/*
 * SIGKILLs the group of a command that may have exited already: its zombie, not reaped before the job is done,
 * keeps the process group id from being reused, so a grandchild still holding the job's streams gets it, and
 * nothing else does.
 */
static void kill_group_for_good(struct job *job) {
  if (!job->reaped) kill(-job->pid, SIGKILL);
}

/* Collects the zombie of a command whose exit was seen (check_exit): its pid may be reused from now on. */
static void reap(struct job *job) {
  if (job->reaped || !job->exited) return;
  job->reaped = true;
  while (waitpid(job->pid, NULL, WNOHANG) < 0 && errno == EINTR) {}
}

/* The exit payload: u32 JSON length, JSON {code, signal, reason}, u32 stdout length, stdout, stderr. */
static void send_exit(struct job *job, uint8_t type, bool with_output) {
  char json[128];
  const char *name = job->sig ? signal_name(job->sig) : NULL;
  char code[16], signal_text[32], reason[16];
  /* A signal without a name on the wire (a real-time one) is reported as a shell does: code 128 + its number. */
  if (name) snprintf(code, sizeof code, "null");
  else snprintf(code, sizeof code, "%d", job->code);
  if (name) snprintf(signal_text, sizeof signal_text, "\"%s\"", name);
  else snprintf(signal_text, sizeof signal_text, "null");
  if (job->reason) snprintf(reason, sizeof reason, "\"%s\"", job->reason);
  else snprintf(reason, sizeof reason, "null");
  int json_len = snprintf(json, sizeof json, "{\"code\":%s,\"signal\":%s,\"reason\":%s}", code, signal_text, reason);
  size_t stdout_len = with_output ? job->collected[1].len : 0;
  size_t stderr_len = with_output ? job->collected[2].len : 0;
  size_t length = 8 + (size_t)json_len + stdout_len + stderr_len;
  uint8_t *p = frame_begin(length);
  put_u32(p, (uint32_t)json_len);
  memcpy(p + 4, json, (size_t)json_len);
  put_u32(p + 4 + json_len, (uint32_t)stdout_len);
  if (stdout_len) memcpy(p + 8 + json_len, job->collected[1].data, stdout_len);
  if (stderr_len) memcpy(p + 8 + json_len + stdout_len, job->collected[2].data, stderr_len);
  frame_end(type, job->id, length);
}

/* Completes a request once the child exited and its streams ended: Exit, then only stdin may still drain. */
static void finish(struct job *job) {
  if (job->done || !job->exited || job->open[1] || job->open[2]) return;
  job->done = true;
  job->timeout_at = job->force_at = job->grace_at = 0;
  reap(job);
  unhash(job);
  send_exit(job, F_EXIT, true);
  if (job->stdin_head == NULL) bury(job);
}

/*
 * Arms the quiet period that releases streams a grandchild keeps open after the exit: once the child exited,
 * while a stream is still open and none is paused.
 */
static void arm_grace(struct job *job) {
  job->grace_at = 0;
  if (!job->exited || !(job->open[1] || job->open[2]) || job->paused[1] || job->paused[2]) return;
  if (job->buffered && output_held) return; /* not read now: what waits in its pipes is not a grandchild's */
  job->grace_at = now_us() + STREAM_GRACE_US;
}

/* Stops (or resumes) reading every buffered command's output, and its grace with it (see OUT_HIGH_BYTES). */
static void hold_buffered_output(bool hold) {
  output_held = hold;
  for (struct job *job = live; job != NULL; job = job->next) {
    if (!job->buffered) continue;
    for (int fd = 1; fd <= 2; fd++) {
      if (job->open[fd]) watch_set(&job->w_out[fd], hold ? 0 : WANT_IN);
    }
    arm_grace(job);
  }
}

/* Ends a stream: nothing more is read from it; the host hears StreamEnd when `tell`. */
static void close_stream(struct job *job, int fd, bool tell) {
  bool was_paused = job->paused[fd];
  job->open[fd] = false;
  job->paused[fd] = false;
  watch_close(&job->w_out[fd]);
  if (was_paused) arm_grace(job);
  if (tell) send_frame(F_STREAM_END, job->id, &(uint8_t){(uint8_t)fd}, 1);
  finish(job);
}

static void flush_collected(struct job *job) {
  for (int fd = 1; fd <= 2; fd++) {
    if (job->collected[fd].len > 0) {
      send_frame(fd == 1 ? F_STDOUT : F_STDERR, job->id, job->collected[fd].data, job->collected[fd].len);
    }
    job->collected[fd].len = 0;
  }
  job->collected_bytes = 0;
}

static void stop_for(struct job *job, const char *reason, int sig) {
  if (job->exited || job->reason != NULL) return;
  job->reason = reason;
  kill_child(job, sig, true);
  job->force_at = deadline_after(job->force_kill_ms);
}

/* Buffered output, kept in pieces of at most MAX_CHUNK_BYTES, sent ahead before they would pass it. */
static void collect(struct job *job, int fd, const uint8_t *data, size_t len) {
  job->total_bytes += (double)len;
  if (job->has_max_buffer && job->total_bytes > job->max_buffer) {
    stop_for(job, "maxBuffer", SIGKILL);
    return;
  }
  if (job->collected_bytes + len > MAX_CHUNK_BYTES) flush_collected(job);
  buf_put(&job->collected[fd], data, len);
  job->collected_bytes += len;
}

/*
 * Streamed reading pauses while the host's window is full (less than a byte of it left: a window may be fractional),
 * and resumes (arming the grace) once it is not.
 */
static void update_pause(struct job *job, int fd) {
  bool full = job->window - job->unacked[fd] < 1;
  if (full == job->paused[fd]) return;
  job->paused[fd] = full;
  watch_set(&job->w_out[fd], full ? 0 : WANT_IN);
  if (!full) arm_grace(job);
}

static void read_output(struct job *job, int fd) {
  static uint8_t scratch[OUTPUT_READ_BYTES];
  struct watch *w = &job->w_out[fd];
  if (!job->open[fd] || w->fd < 0) return;
  ssize_t n;
  if (job->buffered) {
    n = read(w->fd, scratch, sizeof scratch);
    if (n > 0) collect(job, fd, scratch, (size_t)n);
  } else {
    double room = job->window - job->unacked[fd];
    size_t max = room >= MAX_CHUNK_BYTES ? MAX_CHUNK_BYTES : (size_t)room;
    if (max == 0) {
      update_pause(job, fd);
      return;
    }
    uint8_t *p = frame_begin(max);
    n = read(w->fd, p, max);
    if (n > 0) {
      frame_end(fd == 1 ? F_STDOUT : F_STDERR, job->id, (size_t)n);
      job->unacked[fd] += (double)n;
      update_pause(job, fd);
    }
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    close_stream(job, fd, !job->buffered);
    return;
  }
  if (job->exited) arm_grace(job);
}

/*
 * Sees whether the command exited, without reaping it (WNOWAIT): its zombie stays until the job is done (reap), so
 * the force timer and stop() can still SIGKILL its process group while a grandchild holds the job's streams.
 */
static void check_exit(struct job *job) {
  if (job->exited) return;
  siginfo_t info;
  memset(&info, 0, sizeof info);
  int r = waitid(P_PID, (id_t)job->pid, &info, WEXITED | WNOHANG | WNOWAIT);
  if (r < 0 && errno == EINTR) return;
  if (r == 0 && info.si_pid == 0) return; /* still running */
  watch_close(&job->w_exit);
  job->exited = true;
  if (r < 0) {
    job->code = -1; /* not ours any more (ECHILD): nothing sensible to report, nothing to reap or signal */
    job->reaped = true;
  } else if (info.si_code == CLD_EXITED) {
    job->code = info.si_status;
  } else {
    job->sig = info.si_status;
    job->code = 128 + job->sig;
  }
  job->timeout_at = 0;
  /* A forced SIGKILL still due reaches the group while a stream is open: a grandchild may hold it. */
  if (!job->open[1] && !job->open[2]) job->force_at = 0;
  if (!job->buffered && (job->open[1] || job->open[2])) send_exit(job, F_EXITED, false);
  arm_grace(job);
  finish(job);
}

static void ack_stdin(struct job *job, uint8_t status) {
  if (!job->done) send_frame(F_STDIN_ACK, job->id, &status, 1);
}

/* Writes queued stdin in order: StdinAck 0 for each write done, 1 once the child has closed its stdin. */
static void drain_stdin(struct job *job) {
  struct watch *w = &job->w_stdin;
  while (job->stdin_head != NULL) {
    struct stdin_op *op = job->stdin_head;
    if (op->data != NULL && w->fd >= 0 && op->off < op->len) {
      ssize_t n = write(w->fd, op->data + op->off, op->len - op->off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch_set(w, WANT_OUT);
        return;
      }
      if (n < 0) watch_close(w); /* EPIPE: the child closed its stdin */
      else op->off += (size_t)n;
      if (n >= 0 && op->off < op->len) continue;
    }
    if (op->data == NULL) watch_close(w);
    else ack_stdin(job, w->fd >= 0 ? 0 : 1);
    job->stdin_head = op->next;
    if (job->stdin_head == NULL) job->stdin_tail = NULL;
    free(op->data);
    free(op);
  }
  watch_set(w, 0);
  if (job->done) bury(job);
}

static void queue_stdin(struct job *job, uint8_t *data, size_t len) {
  struct stdin_op *op = xrealloc(NULL, sizeof *op);
  op->next = NULL;
  op->data = data;
  op->len = len;
  op->off = 0;
  if (job->stdin_tail) job->stdin_tail->next = op;
  else job->stdin_head = op;
  job->stdin_tail = op;
  if (op == job->stdin_head) drain_stdin(job);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Spawning */

struct spawn_error {
  int err;
  const char *code; /* overrides errno's name */
};

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

/* Validates a spawn request exactly as parseRequest in worker/serve.ts does. */
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
  if (!is_bool(GET("group"))) return false;
#undef GET
  return true;
}

static bool mode_is(const struct json_doc *doc, const char *name, const char *mode) {
  return strcmp(json_str(doc, json_get(doc, &doc->nodes[0], name)), mode) == 0;
}

/*
 * An environment being built: entries with their names' lengths, and an open-addressing table of their indices (+1,
 * 0: empty) by name, so that merging a request's env into the inherited one takes linear time.
 */
struct env_builder {
  char **entries;
  size_t *name_lens;
  size_t count;
  size_t *table;
  size_t mask;
};

static size_t name_hash(const char *name, size_t len) {
  uint64_t h = 14695981039346656037u; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)name[i]) * 1099511628211u;
  return (size_t)h;
}

static void env_init(struct env_builder *env, size_t room) {
  size_t slots = 16;
  while (slots < 2 * room) slots *= 2;
  env->entries = xrealloc(NULL, (room + 1) * sizeof *env->entries);
  env->name_lens = xrealloc(NULL, (room + 1) * sizeof *env->name_lens);
  env->table = xrealloc(NULL, slots * sizeof *env->table);
  memset(env->table, 0, slots * sizeof *env->table);
  env->mask = slots - 1;
  env->count = 0;
}

/* Adds `entry` ("NAME=value", NAME `name_len` bytes), or with `replace`, replaces the entry of the same name. */
static void env_put(struct env_builder *env, char *entry, size_t name_len, bool replace) {
  size_t slot = name_hash(entry, name_len) & env->mask;
  for (; env->table[slot] != 0; slot = (slot + 1) & env->mask) {
    size_t k = env->table[slot] - 1;
    if (env->name_lens[k] == name_len && memcmp(env->entries[k], entry, name_len) == 0) {
      if (replace) env->entries[k] = entry; /* a later value of the same name replaces the earlier one */
      return;
    }
  }
  env->table[slot] = env->count + 1;
  env->name_lens[env->count] = name_len;
  env->entries[env->count++] = entry;
}

/* The value of NAME in a NULL-terminated environment, or NULL. */
static const char *env_lookup(char *const *envp, const char *name) {
  size_t len = strlen(name);
  for (; *envp != NULL; envp++) {
    if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') return *envp + len + 1;
  }
  return NULL;
}

/*
 * The program to execute: `cmd` itself when it names a path, else the first executable `cmd` in the command's
 * own PATH (as Node and the other workers look it up), or an error: EACCES when one was found but none can be
 * executed, ENOENT otherwise. A relative PATH entry (an empty one is ".") is relative to the command's `cwd` when
 * it has one, as the command runs there: it is looked for there, and returned as is, for the command's exec.
 */
static char *resolve_program(const char *cmd, char *const *envp, const char *cwd, int *err) {
  if (cmd[0] == '\0') {
    *err = ENOENT;
    return NULL;
  }
  if (strchr(cmd, '/') != NULL) return strdup(cmd);
  const char *path = env_lookup(envp, "PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  size_t cmd_len = strlen(cmd);
  size_t cwd_len = cwd != NULL ? strlen(cwd) : 0;
  *err = ENOENT;
  for (const char *p = path;; p++) {
    const char *colon = strchr(p, ':');
    size_t dir_len = colon ? (size_t)(colon - p) : strlen(p);
    bool relative = dir_len == 0 || p[0] != '/';
    /* `cwd/` ahead of the candidate when it is relative: what the worker stats; the command gets the rest. */
    size_t prefix = relative && cwd_len > 0 ? cwd_len + 1 : 0;
    char *joined = xrealloc(NULL, prefix + dir_len + cmd_len + 3);
    if (prefix) {
      memcpy(joined, cwd, cwd_len);
      joined[cwd_len] = '/';
    }
    char *candidate = joined + prefix;
    if (dir_len == 0) {
      memcpy(candidate, "./", 2);
      dir_len = 2;
    } else {
      memcpy(candidate, p, dir_len);
      if (candidate[dir_len - 1] != '/') candidate[dir_len++] = '/';
    }
    memcpy(candidate + dir_len, cmd, cmd_len + 1);
    struct stat st;
    if (stat(joined, &st) == 0 && !S_ISDIR(st.st_mode)) {
      if (access(joined, X_OK) == 0) {
        if (prefix) memmove(joined, candidate, dir_len + cmd_len + 1);
        return joined;
      }
      *err = EACCES;
    }
    free(joined);
    if (colon == NULL) break;
    p = colon;
  }
  return NULL;
}

struct child_plan {
  const char *path;
  char **argv;
  char **envp;
  const char *cwd;
  int stdio_fd[3];    /* dup2'd to 0, 1, 2; -1: open /dev/null; -2: inherit */
  bool detached;
  bool set_uid, set_gid;
  uid_t uid;
  gid_t gid;
};

/*
 * vfork + execve, for what posix_spawn cannot express here (uid, gid; a cwd without addchdir_np). The child
 * shares the worker's memory until it execs, so it only makes system calls and records a failure in `*failed`.
 */
static pid_t vfork_exec(const struct child_plan *plan, int *err) {
  volatile int failed = 0;
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old); /* no handler of the worker's may run in the child */
  pid_t pid = vfork();
  if (pid == 0) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &dfl, NULL);
    if (plan->detached ? setsid() < 0 : setpgid(0, 0) < 0) goto fail;
    for (int fd = 0; fd < 3; fd++) {
      int from = plan->stdio_fd[fd];
      if (from == -2) continue;
      if (from == -1) {
        /* Close-on-exec: only its dup2'd copy reaches the command (fds 0-2 stay taken: it cannot be `fd`). */
        from = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (from < 0) goto fail;
      }
      if (dup2(from, fd) < 0) goto fail;
    }
    if (plan->cwd != NULL && chdir(plan->cwd) < 0) goto fail;
    if (plan->set_gid || plan->set_uid) (void)setgroups(0, NULL);
    if (plan->set_gid && setgid(plan->gid) < 0) goto fail;
    if (plan->set_uid && setuid(plan->uid) < 0) goto fail;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(plan->path, plan->argv, plan->envp);
  fail:
    failed = errno ? errno : EINVAL;
    _exit(127);
  }
  int saved = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    *err = saved;
    return -1;
  }
  if (failed) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    *err = failed;
    return -1;
  }
  return pid;
}

static pid_t posix_spawn_plan(const struct child_plan *plan, int *err) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (plan->detached) {
#ifdef POSIX_SPAWN_SETSID
    flags |= POSIX_SPAWN_SETSID;
#endif
  } else {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  for (int fd = 0; fd < 3; fd++) {
    if (plan->stdio_fd[fd] == -1) posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0);
    else if (plan->stdio_fd[fd] >= 0) posix_spawn_file_actions_adddup2(&actions, plan->stdio_fd[fd], fd);
  }
#if HAVE_ADDCHDIR
  if (plan->cwd != NULL) posix_spawn_file_actions_addchdir_np(&actions, plan->cwd);
#endif
  pid_t pid;
  int r = posix_spawn(&pid, plan->path, &actions, &attr, plan->argv, plan->envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (r != 0) {
    *err = r;
    return -1;
  }
  return pid;
}

/* The most of a program's name a SpawnError's message quotes (a name can take most of a 64 MiB frame). */
#define MESSAGE_CMD_BYTES 4096

/* `message` (NULL: "spawn <cmd> <code>") goes out as is; it must need no JSON escaping. */
static void send_spawn_error(uint32_t id, const char *cmd, int err, const char *code, const char *message) {
  if (code == NULL) code = errno_name(err);
  struct buf b = {0};
  char head[128];
  int n = snprintf(head, sizeof head, "{\"code\":\"%s\",\"errno\":%d,\"message\":\"", code, -err);
  buf_put(&b, head, (size_t)n);
  if (message != NULL) {
    buf_put(&b, message, strlen(message));
    buf_put(&b, "\"}", 2);
    send_frame(F_SPAWN_ERROR, id, b.data, b.len);
    buf_free(&b);
    return;
  }
  buf_put(&b, "spawn ", 6);
  /*
   * The command in the message, JSON-escaped (it is valid UTF-8: it came out of the JSON parser), and cut to its
   * first MESSAGE_CMD_BYTES at a character's start: a name of control characters cannot grow past a frame.
   */
  size_t len = strlen(cmd);
  if (len > MESSAGE_CMD_BYTES) {
    len = MESSAGE_CMD_BYTES;
    while (len > 0 && ((unsigned char)cmd[len] & 0xc0) == 0x80) len--;
  }
  for (const char *c = cmd; c < cmd + len; c++) {
    unsigned char ch = (unsigned char)*c;
    const char *esc = NULL;
    char unicode[8];
    switch (ch) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\b': esc = "\\b"; break;
    case '\t': esc = "\\t"; break;
    case '\n': esc = "\\n"; break;
    case '\f': esc = "\\f"; break;
    case '\r': esc = "\\r"; break;
    default:
      if (ch < 0x20) {
        snprintf(unicode, sizeof unicode, "\\u%04x", ch);
        esc = unicode;
      }
    }
    if (esc != NULL) buf_put(&b, esc, strlen(esc));
    else buf_put(&b, c, 1);
  }
  n = snprintf(head, sizeof head, " %s\"}", code);
  buf_put(&b, head, (size_t)n);
  send_frame(F_SPAWN_ERROR, id, b.data, b.len);
  buf_free(&b);
}

static void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Starts a validated request's command; on failure the host hears SpawnError and the job is freed. */
static void start_job(struct job *job, const struct json_doc *doc) {
  const struct json_node *root = &doc->nodes[0];
  const struct json_node *cmd = json_get(doc, root, "cmd");
  const struct json_node *args = json_get(doc, root, "args");
  const struct json_node *cwd = json_get(doc, root, "cwd");
  const struct json_node *env = json_get(doc, root, "env");
  const struct json_node *argv0 = json_get(doc, root, "argv0");
  const struct json_node *clear = json_get(doc, root, "clearEnv");
  const struct json_node *uid = json_get(doc, root, "uid");
  const struct json_node *gid = json_get(doc, root, "gid");
  int err = 0;
  const char *code = NULL;
  char *path = NULL;
  size_t argc = 0, envc = 0;
  for (const struct json_node *a = json_first(doc, args); a; a = json_next(doc, a)) argc++;
  if (env) {
    for (const struct json_node *e = json_first(doc, env); e; e = json_next(doc, e)) envc++;
  }
  bool cleared = clear != NULL && json_truthy(clear);
  size_t inherited = 0;
  if (!cleared) {
    while (environ[inherited] != NULL) inherited++;
  }
  char **argv = xrealloc(NULL, (argc + 2) * sizeof *argv);
  struct env_builder envb;
  env_init(&envb, inherited + envc);
  char **owned = xrealloc(NULL, (envc + 1) * sizeof *owned);
  size_t owned_count = 0;
  int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  struct child_plan plan = {0};

  /* Strings with a NUL inside cannot reach execve: the command fails as Node's spawn does (EINVAL). */
  bool nul = cmd->has_nul || (cwd && cwd->has_nul) || (argv0 && argv0->has_nul);
  size_t i = 0;
  argv[i++] = (char *)json_str(doc, argv0 ? argv0 : cmd);
  for (const struct json_node *a = json_first(doc, args); a; a = json_next(doc, a)) {
    nul = nul || a->has_nul;
    argv[i++] = (char *)json_str(doc, a);
  }
  argv[i] = NULL;
  for (size_t k = 0; k < inherited; k++) {
    const char *eq = strchr(environ[k], '=');
    /* Of an inherited name set twice, the first counts (getenv's). */
    env_put(&envb, environ[k], eq ? (size_t)(eq - environ[k]) : strlen(environ[k]), false);
  }
  if (env) {
    for (const struct json_node *e = json_first(doc, env); e; e = json_next(doc, e)) {
      nul = nul || e->has_nul || e->key_has_nul;
      const char *key = json_key(doc, e);
      size_t key_len = e->key_len;
      char *entry = xrealloc(NULL, key_len + e->str_len + 2);
      memcpy(entry, key, key_len);
      entry[key_len] = '=';
      memcpy(entry + key_len + 1, json_str(doc, e), e->str_len + 1);
      owned[owned_count++] = entry;
      env_put(&envb, entry, key_len, true);
    }
  }
  envb.entries[envb.count] = NULL;
  char **envp = envb.entries;
  if (nul) {
    err = EINVAL;
    goto failed;
  }
  if (uid && (uid->number < 0 || uid->number > (double)UINT32_MAX - 1)) err = EINVAL;
  if (gid && (gid->number < 0 || gid->number > (double)UINT32_MAX - 1)) err = EINVAL;
  if (err) goto failed;
  path = resolve_program(json_str(doc, cmd), envp, cwd ? json_str(doc, cwd) : NULL, &err);
  if (path == NULL) goto failed;

  const char *names[3] = {"stdin", "stdout", "stderr"};
  for (int fd = 0; fd < 3; fd++) {
    if (mode_is(doc, names[fd], "piped")) {
      if (pipe2(pipes[fd], O_CLOEXEC) != 0) {
        err = errno;
        goto failed;
      }
      job->piped[fd] = true;
      plan.stdio_fd[fd] = pipes[fd][fd == 0 ? 0 : 1];
    } else if (fd > 0 && mode_is(doc, names[fd], "inherit")) {
      plan.stdio_fd[fd] = -2;
    } else {
      plan.stdio_fd[fd] = -1; /* "null", and stdin "inherit": a worker has no terminal to share */
    }
  }
  plan.path = path;
  plan.argv = argv;
  plan.envp = envp;
  plan.cwd = cwd ? json_str(doc, cwd) : NULL;
  plan.detached = job->detached;
  plan.set_uid = uid != NULL;
  plan.set_gid = gid != NULL;
  plan.uid = uid ? (uid_t)uid->number : 0;
  plan.gid = gid ? (gid_t)gid->number : 0;
  bool needs_vfork = plan.set_uid || plan.set_gid || (!HAVE_ADDCHDIR && plan.cwd != NULL);
#ifndef POSIX_SPAWN_SETSID
  needs_vfork = needs_vfork || plan.detached;
#endif
  job->pid = needs_vfork ? vfork_exec(&plan, &err) : posix_spawn_plan(&plan, &err);
  if (job->pid < 0 && err == ENOEXEC) {
    /* A script without "#!": the shell runs it, as execvp (and so Node) does. */
    char **script = xrealloc(NULL, (argc + 3) * sizeof *script);
    script[0] = "/bin/sh";
    script[1] = path;
    memcpy(script + 2, argv + 1, (argc + 1) * sizeof *argv);
    plan.path = "/bin/sh";
    plan.argv = script;
    job->pid = needs_vfork ? vfork_exec(&plan, &err) : posix_spawn_plan(&plan, &err);
    free(script);
  }
  if (job->pid < 0) goto failed;

  for (int fd = 0; fd < 3; fd++) {
    if (!job->piped[fd]) continue;
    close(pipes[fd][fd == 0 ? 0 : 1]);
    int mine = pipes[fd][fd == 0 ? 1 : 0];
    set_nonblocking(mine);
    if (fd == 0) job->w_stdin.fd = mine;
    else job->w_out[fd].fd = mine;
  }
  goto done;

failed:
  for (int fd = 0; fd < 3; fd++) {
    if (pipes[fd][0] >= 0) close(pipes[fd][0]);
    if (pipes[fd][1] >= 0) close(pipes[fd][1]);
    job->piped[fd] = false;
  }
  job->pid = -1;
  send_spawn_error(job->id, json_str(doc, cmd), err, code, NULL);
done:
  for (size_t k = 0; k < owned_count; k++) free(owned[k]);
  free(owned);
  free(argv);
  free(envb.entries);
  free(envb.name_lens);
  free(envb.table);
  free(path);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Frames from the host */

static void protocol_error(const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  fprintf(stderr, "spawnpool worker: ");
  vfprintf(stderr, format, ap);
  fprintf(stderr, "; closing\n");
  va_end(ap);
  stop(1);
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
  const struct json_node *root = &doc.nodes[0];
  const struct json_node *n;
  job->buffered = json_get(&doc, root, "buffered")->type == JSON_TRUE;
  job->detached = (n = json_get(&doc, root, "detached")) != NULL && n->type == JSON_TRUE;
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
  start_job(job, &doc);
  json_free(&doc);
  if (job->pid < 0) {
    free(job);
    return;
  }
  uint8_t pid[4];
  put_u32(pid, (uint32_t)job->pid);
  send_frame(F_SPAWNED, id, pid, 4);
  job->hash_next = by_id[id % HASH_BUCKETS];
  by_id[id % HASH_BUCKETS] = job;
  job->next = live;
  if (live) live->prev = job;
  live = job;
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
    if (type < F_SPAWN || type > F_RELEASE) protocol_error("Unknown frame type %u", type);
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
    bool group = len > 0 && payload[0] == '-';
    const char *name = (const char *)payload + (group ? 1 : 0);
    kill_child(job, signal_number(name, len - (group ? 1 : 0)), group);
    return;
  }
  case F_RELEASE: {
    int fd = decode_fd(payload, len);
    if (job->open[fd]) close_stream(job, fd, false);
    return;
  }
  case F_CREDIT: {
    int fd = decode_fd(payload, len);
    if (len < 5) protocol_error("Frame payload is too short");
    double acked = job->unacked[fd] - (double)get_u32(payload + 1);
    job->unacked[fd] = acked > 0 ? acked : 0;
    if (job->open[fd]) update_pause(job, fd);
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
  if (type < F_SPAWN || type > F_RELEASE) protocol_error("Unknown frame type %u", type);
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

static void read_channel(void) {
  static uint8_t buffer[CHANNEL_READ_BYTES];
  ssize_t n = read(channel.fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) stop(0); /* the host closed the channel, or it broke */
  decode(buffer, (size_t)n);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Stopping, signals, timers */

static void stop(int code) {
  static bool stopping;
  if (stopping) _exit(code);
  stopping = true;
  for (struct job *job = live; job != NULL; job = job->next) {
    if (!job->done && !job->detached) kill_group_for_good(job);
  }
  if (channel.fd >= 0 && out.len > out_sent) (void)!write(channel.fd, out.data + out_sent, out.len - out_sent);
  exit(code);
}

static void on_signal(int sig) {
  int saved = errno;
  uint8_t byte = (uint8_t)sig;
  (void)!write(signal_pipe[1], &byte, 1);
  errno = saved;
}

static void read_signals(void) {
  uint8_t bytes[64];
  ssize_t n;
  bool child = false;
  while ((n = read(signal_watch.fd, bytes, sizeof bytes)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (bytes[i] != SIGCHLD) stop(0);
      child = true;
    }
  }
  if (!child) return;
  /* The commands without a pidfd watched: all of them in a poll build, or those pidfd_open failed for. */
  for (struct job *job = live, *next; job != NULL; job = next) {
    next = job->next;
    if (job->w_exit.fd < 0) check_exit(job);
  }
}

static void run_timers(void) {
  int64_t now = now_us();
  for (struct job *job = live, *next; job != NULL; job = next) {
    next = job->next;
    if (job->timeout_at && now >= job->timeout_at) {
      job->timeout_at = 0;
      stop_for(job, "timeout", job->kill_signal);
    }
    if (job->force_at && now >= job->force_at) {
      job->force_at = 0;
      kill_group_for_good(job);
    }
    if (job->grace_at && now >= job->grace_at) {
      job->grace_at = 0;
      for (int fd = 1; fd <= 2; fd++) {
        if (job->open[fd]) close_stream(job, fd, !job->buffered);
      }
    }
  }
}

/* Milliseconds until the next timer, -1 when none. */
static int next_timeout_ms(void) {
  int64_t next = 0;
  for (struct job *job = live; job != NULL; job = job->next) {
    int64_t at[3] = {job->timeout_at, job->force_at, job->grace_at};
    for (int i = 0; i < 3; i++) {
      if (at[i] && (next == 0 || at[i] < next)) next = at[i];
    }
  }
  if (next == 0) return -1;
  int64_t wait = (next - now_us() + 999) / 1000;
  if (wait < 0) return 0;
  return wait > INT_MAX ? INT_MAX : (int)wait;
}

static void dispatch(struct watch *w, bool readable, bool writable) {
  if (w->fd < 0) return; /* closed earlier in this turn */
  switch (w->kind) {
  case W_CHANNEL:
    if (writable) flush_out();
    if (readable) read_channel();
    break;
  case W_SIGNALS:
    read_signals();
    break;
  case W_STDIN:
    drain_stdin(w->job);
    break;
  case W_OUTPUT:
    read_output(w->job, w->stream);
    break;
  case W_EXIT:
    check_exit(w->job);
    break;
  }
}

static void loop(void) {
  for (;;) {
    flush_out();
    free_graves();
    int timeout = next_timeout_ms();
#if USE_EPOLL
    struct epoll_event events[64];
    int n = epoll_wait(epoll_fd, events, 64, timeout);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "spawnpool worker: epoll_wait: %s; closing\n", strerror(errno));
      stop(1);
    }
    for (int i = 0; i < n; i++) {
      uint32_t e = events[i].events;
      struct watch *w = events[i].data.ptr;
      dispatch(w, (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0, (e & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0);
    }
#else
    static struct pollfd *fds;
    static struct watch **watches;
    static size_t room;
    size_t count = 0, needed = 2;
    for (struct job *job = live; job != NULL; job = job->next) needed += 4;
    if (needed > room) {
      room = needed * 2;
      fds = xrealloc(fds, room * sizeof *fds);
      watches = xrealloc(watches, room * sizeof *watches);
    }
#define ADD(wp)                                                                                                 \
  do {                                                                                                          \
    struct watch *w_ = (wp);                                                                                    \
    if (w_->fd >= 0 && w_->events) {                                                                            \
      fds[count].fd = w_->fd;                                                                                   \
      fds[count].events = (short)((w_->events & WANT_IN ? POLLIN : 0) | (w_->events & WANT_OUT ? POLLOUT : 0)); \
      fds[count].revents = 0;                                                                                   \
      watches[count++] = w_;                                                                                    \
    }                                                                                                           \
  } while (0)
    ADD(&channel);
    ADD(&signal_watch);
    for (struct job *job = live; job != NULL; job = job->next) {
      ADD(&job->w_stdin);
      ADD(&job->w_out[1]);
      ADD(&job->w_out[2]);
      ADD(&job->w_exit);
    }
#undef ADD
    int n = poll(fds, (nfds_t)count, timeout);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "spawnpool worker: poll: %s; closing\n", strerror(errno));
      stop(1);
    }
    for (size_t i = 0; n > 0 && i < count; i++) {
      short e = fds[i].revents;
      if (e == 0) continue;
      dispatch(watches[i], (e & (POLLIN | POLLHUP | POLLERR)) != 0, (e & (POLLOUT | POLLERR | POLLHUP)) != 0);
    }
#endif
    run_timers();
  }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Startup */

/* Reads the bootstrap line from stdin (one byte at a time: nothing past it is consumed), into `line`. */
static bool read_line(char *line, size_t size) {
  size_t len = 0;
  while (len + 1 < size) {
    char c;
    ssize_t n = read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') {
      line[len] = '\0';
      return true;
    }
    line[len++] = c;
  }
  return false;
}

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
 * The unix channel (adapters/_unix_handshake.ts): the line {"path": ..., "secret": <hex>} names the socket (an
 * abstract one when it starts with NUL, its exact length) and the secret presented before any frame.
 */
static int connect_from_bootstrap(void) {
  char line[4096];
  if (!read_line(line, sizeof line)) {
    fprintf(stderr, "spawnpool worker: no bootstrap line on stdin\n");
    return -1;
  }
  struct json_doc doc;
  if (!json_parse(&doc, (const uint8_t *)line, strlen(line)) || doc.nodes[0].type != JSON_OBJECT) {
    fprintf(stderr, "spawnpool worker: malformed bootstrap line\n");
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
    fprintf(stderr, "spawnpool worker: malformed bootstrap line\n");
    return -1;
  }
#ifdef SOCK_CLOEXEC
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
#else
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
#endif
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, addr_len) != 0 || !write_all(fd, key, key_len)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

/* The signals a command gets back to their default disposition: every one this worker ignores (SIGPIPE, ...). */
static void compute_default_signals(void) {
  sigemptyset(&default_signals);
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction sa;
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) != 0) continue;
    if (sa.sa_handler == SIG_IGN) sigaddset(&default_signals, sig);
  }
}

static void install_handler(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
  sigfillset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

int main(void) {
  /*
   * What this worker inherited must not break it: an ignored SIGCHLD would have the kernel reap its commands (their
   * exits lost), a blocked signal would never be handled. And a low soft limit on fds goes up to the hard one, as a
   * runtime's does.
   */
  signal(SIGCHLD, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
#ifdef CLOSE_RANGE_CLOEXEC
  /* Whatever else this worker inherited (fd 3 is the channel, or taken below) reaches no command. */
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
#endif
  /* fds 0-2 stay taken, so no pipe of the worker's can become a command's stdio by accident. */
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) < 0) {
      int null = open("/dev/null", O_RDWR);
      if (null != fd && null >= 0) close(null);
    }
  }
  const char *kind = getenv("SPAWNPOOL_CHANNEL");
  if (kind == NULL || (strcmp(kind, "fd3") != 0 && strcmp(kind, "unix") != 0)) {
    fprintf(stderr, "spawnpool worker: start me through a Pool (SPAWNPOOL_CHANNEL is not set)\n");
    return 2;
  }
  bool fd3 = strcmp(kind, "fd3") == 0;
  /* Nothing of the worker's own plumbing reaches the commands it spawns. */
  unsetenv("SPAWNPOOL_CHANNEL");
  unsetenv("NODE_CHANNEL_FD");
  if (fd3) {
    if (fcntl(3, F_SETFD, FD_CLOEXEC) != 0) return 1;
    channel.fd = 3;
  } else {
    channel.fd = connect_from_bootstrap();
    if (channel.fd < 0) return 1; /* the host went away while this worker started: nobody is left to tell */
  }
  set_nonblocking(channel.fd);

  signal(SIGPIPE, SIG_IGN);
  compute_default_signals();
  if (pipe(signal_pipe) != 0) return 1;
  for (int i = 0; i < 2; i++) {
    fcntl(signal_pipe[i], F_SETFD, FD_CLOEXEC);
    set_nonblocking(signal_pipe[i]);
  }
  signal_watch.fd = signal_pipe[0];
  install_handler(SIGTERM);
  install_handler(SIGINT);
  install_handler(SIGHUP);
#ifdef SYS_pidfd_open
  int probe = (int)syscall(SYS_pidfd_open, getpid(), 0);
  use_pidfd = probe >= 0;
  if (probe >= 0) close(probe);
#endif
  install_handler(SIGCHLD); /* also where pidfds work: pidfd_open can fail (EMFILE) */
#if USE_EPOLL
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return 1;
#endif
  watch_set(&signal_watch, WANT_IN);
  watch_set(&channel, WANT_IN);

  char hello[96];
  int n = snprintf(hello, sizeof hello, "{\"version\":%d,\"runtime\":\"native\",\"pid\":%ld}", PROTOCOL_VERSION,
                   (long)getpid());
  send_frame(F_HELLO, 0, hello, (size_t)n);
  loop();
}
