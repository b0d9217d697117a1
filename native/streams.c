/*
 * A job's streams: output read as the host's window (credit) allows, or collected for a buffered command; the grace
 * that releases streams a grandchild keeps open; and stdin, written in order as the child takes it.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/*
 * Arms the quiet period that releases streams still open after the exit (a grandchild holds them, or nobody reads
 * them): once the child exited, while a stream is still open. Output read and credit from the host restart it, so
 * it runs out only once nothing was read and nothing credited for STREAM_GRACE_US: a paused stream whose reader has
 * gone does not hold its request, its zombie and its pipes for ever.
 */
void arm_grace(struct job *job) {
  job->grace_at = 0;
  if (!job->exited || !(job->open[1] || job->open[2])) return;
  if (job->buffered && output_held) return; /* not read now: what waits in its pipes is not a grandchild's */
  job->grace_at = now_us() + STREAM_GRACE_US;
}

/* Stops (or resumes) reading every buffered command's output, and its grace with it (see OUT_HIGH_BYTES). */
void hold_buffered_output(bool hold) {
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
void close_stream(struct job *job, int fd, bool tell) {
  bool was_paused = job->paused[fd];
  job->open[fd] = false;
  job->paused[fd] = false;
  watch_close(&job->w_out[fd]);
  forget_grown_pipe(job, fd);
  if (was_paused) arm_grace(job);
  if (tell) send_frame(F_STREAM_END, job->id, &(uint8_t){(uint8_t)fd}, 1);
  finish(job);
}

/*
 * Lets go of the job's output streams that are still open (the grace, maxBuffer after the exit). For a command the
 * worker stopped, what still holds them gets the forced SIGKILL now rather than never (the request ends here).
 */
void release_streams(struct job *job) {
  if (job->force_at) {
    job->force_at = 0;
    kill_group_for_good(job);
  }
  for (int fd = 1; fd <= 2; fd++) {
    if (job->open[fd]) close_stream(job, fd, !job->buffered);
  }
}

/* One read's worth of output that is not kept: a released socket's rest. */
static uint8_t scratch[OUTPUT_READ_BYTES];

/* Bytes waiting unread in `fd` (a pipe or a socket), or -1 when it cannot be told. */
static int unread_bytes(int fd) {
  int unread = 0;
  return ioctl(fd, FIONREAD, &unread) == 0 ? unread : -1;
}

/*
 * Whether the command is asleep in a kernel function whose name starts with one of `names` (Linux's /proc/<pid>/wchan;
 * false where that cannot be read).
 */
static bool asleep_in(pid_t pid, const char *const *names, size_t count) {
  char path[40], wchan[64];
  snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, wchan, sizeof wchan - 1);
  close(fd);
  if (n <= 0) return false;
  wchan[n] = '\0';
  for (size_t i = 0; i < count; i++) {
    if (strncmp(wchan, names[i], strlen(names[i])) == 0) return true;
  }
  return false;
}

/* Whether the command is asleep waiting for room in a socket it writes to. */
static bool blocked_in_send(pid_t pid) {
  static const char *const sends[] = {"sock_alloc_send_pskb", "sock_wait_for_wmem", "unix_stream_sendmsg"};
  return asleep_in(pid, sends, sizeof sends / sizeof sends[0]);
}

/* Whether the command is asleep waiting for input (a pipe or socket read, a poll), a timer or a child: not writing. */
static bool waiting_not_writing(pid_t pid) {
  static const char *const waits[] = {
      "unix_stream_read", "unix_stream_data_wait", "anon_pipe_read", "pipe_read",  "do_epoll_wait", "ep_poll",
      "do_select",        "core_sys_select",       "do_sys_poll",    "do_nanosleep", "hrtimer_nanosleep",
      "sigsuspend",       "do_wait",               "kernel_wait4",
  };
  return asleep_in(pid, waits, sizeof waits / sizeof waits[0]);
}

/*
 * The host let a stream go (its reader destroyed it). A pipe is closed at once. A socket is no longer read, and is
 * closed once its writer is blocked on it (nothing written for LINGER_STILL_US, and the command asleep in a socket
 * send, as Linux's /proc/<pid>/wchan tells), once nothing has been written for LINGER_IDLE_US (an idle writer, or one
 * that is not the command itself, or no wchan to read), at most LINGER_MAX_US after the release, or when the job ends.
 * Node's reader stops reading a socket once its stream holds a high-water mark, so a writer such as `yes` is blocked
 * when the reader destroys it and fails with ECONNRESET ("yes: standard output: Connection reset by peer", exit 1);
 * this worker reads ahead by the host's window, so at a release it has often emptied the socket, and a writer then
 * meets EPIPE and dies of SIGPIPE. Letting it fill the socket first gives it Node's ending. Stillness alone is not
 * proof: on a busy machine a writer can go unscheduled for a millisecond with room left in the socket.
 * A command asleep waiting for its input, a timer or a child is not writing: its socket is emptied and closed at once,
 * so its next write fails with EPIPE, as after Node's reader destroyed a stream it kept reading. So is a socket nothing
 * was ever written to (a command still starting, its runtime loading): there is no writer to let fill it, and a
 * linger would let its first write through once it had been still long enough.
 */
void release_stream(struct job *job, int fd) {
  struct watch *w = &job->w_out[fd];
  if (!job->sockets || job->exited || w->fd < 0) {
    close_stream(job, fd, false);
    return;
  }
  bool never_written = !job->wrote[fd] && unread_bytes(w->fd) == 0;
  if (never_written || waiting_not_writing(job->pid)) {
    for (int i = 0; i < 16 && read(w->fd, scratch, sizeof scratch) > 0; i++) {}
    close_stream(job, fd, false);
    return;
  }
  job->lingering[fd] = true;
  job->linger_unread[fd] = -1;
  job->linger_since[fd] = 0;
  job->open[fd] = false;
  job->paused[fd] = false;
  watch_set(w, 0);
  int64_t now = now_us();
  job->linger_at = now + LINGER_STILL_US;
  job->linger_until = now + LINGER_MAX_US;
  finish(job); /* a job that ends now closes the socket with the rest (bury) */
}

/* Closes each lingering socket whose writer has stopped (see release_stream); the timer runs while one is left. */
void check_lingering(struct job *job) {
  int64_t now = now_us();
  bool left = false;
  for (int fd = 1; fd <= 2; fd++) {
    if (!job->lingering[fd]) continue;
    int unread = unread_bytes(job->w_out[fd].fd);
    bool gone = unread < 0 || now >= job->linger_until;
    if (!gone && unread != job->linger_unread[fd]) {
      job->linger_unread[fd] = unread;
      job->linger_since[fd] = now;
      left = true;
      continue;
    }
    int64_t still = now - job->linger_since[fd];
    if (gone || still >= LINGER_IDLE_US || blocked_in_send(job->pid)) {
      job->lingering[fd] = false;
      watch_close(&job->w_out[fd]);
      continue;
    }
    left = true;
  }
  job->linger_at = left ? now + LINGER_STILL_US : 0;
}

static void flush_collected(struct job *job) {
  send_spawned(job);
  for (int fd = 1; fd <= 2; fd++) {
    if (job->collected[fd].len > 0) {
      frame_begin(0);
      frame_end_partial(fd == 1 ? F_STDOUT : F_STDERR, job->id, job->collected[fd].len, 0);
      send_owned(&job->collected[fd]);
    }
  }
  job->collected_bytes = 0;
}

/*
 * Past maxBuffer: the request ends with that reason whenever the limit is passed. A command still running is stopped
 * (its group killed, and what it writes until it is gone is not kept); after its exit (a background job of its wrote
 * the rest) its streams are closed, as Node's execFile destroys them, so that the job ends now.
 */
static void passed_max_buffer(struct job *job) {
  if (!job->exited) {
    stop_for(job, "maxBuffer", SIGKILL);
    return;
  }
  if (job->reason == NULL) job->reason = "maxBuffer";
  release_streams(job);
}

/*
 * A buffer at hand for a buffered command's first read (its output's size not known yet): a read of more than
 * SMALL_OUTPUT_BYTES keeps it as the command's buffer (a spare one comes to hand for the next), a smaller one is copied
 * out into a buffer just big enough (most outputs are small). So a large output is never copied in the worker.
 */
static struct buf hand;
#define SMALL_OUTPUT_BYTES (16 * 1024)
/*
 * A pipe's capacity by default (Linux), and what a buffered command's pipe is grown to once its output filled that: the
 * command then writes on without waiting for the worker, and the worker reads it in fewer, larger reads. Unprivileged,
 * a pipe may grow to 1 MiB (fs.pipe-max-size); past fs.pipe-user-pages-soft in all of a user's pipes the kernel refuses.
 */
#define PIPE_DEFAULT_BYTES (64 * 1024)
#define PIPE_LARGE_BYTES (256 * 1024)
/*
 * Grown pipes open at once in one worker, at most: 4 MiB of pipe, so that a pool of four workers stays at a quarter of
 * the default fs.pipe-user-pages-soft (64 MiB), past which every new pipe of the user's, anywhere, gets two pages.
 */
#define PIPES_GROWN_MAX 16
static int pipes_grown;

void forget_grown_pipe(struct job *job, int fd) {
  if (!job->pipe_grown[fd]) return;
  job->pipe_grown[fd] = false;
  pipes_grown--;
}

/*
 * Reads a buffered command's output into its collected buffer, as much as the pipe holds and the buffer takes, kept in
 * pieces of at most MAX_CHUNK_BYTES (sent ahead before a read could pass it). Past maxBuffer, the read is not kept
 * (passed_max_buffer).
 */
static ssize_t collect(struct job *job, int fd) {
  if (job->collected_bytes + OUTPUT_READ_BYTES > MAX_CHUNK_BYTES) flush_collected(job);
  struct buf *b = &job->collected[fd];
  bool first = b->cap == 0;
  if (first && hand.cap == 0) buf_take_spare(&hand);
  if (!first) buf_reserve_output(b);
  struct buf *into = first ? &hand : b;
  size_t max = into->cap - into->len;
  if (max > MAX_CHUNK_BYTES - job->collected_bytes) max = MAX_CHUNK_BYTES - job->collected_bytes;
  ssize_t n = read(job->w_out[fd].fd, into->data + into->len, max);
  if (n <= 0) return n;
  job->wrote[fd] = true;
  job->total_bytes += (double)n;
  if (job->has_max_buffer && job->total_bytes > job->max_buffer) {
    passed_max_buffer(job);
    return n;
  }
#ifdef F_SETPIPE_SZ
  /* A first read that emptied a full default pipe: a large output, which a larger pipe takes in fewer wake-ups. */
  if (first && n >= PIPE_DEFAULT_BYTES && !job->sockets && pipes_grown < PIPES_GROWN_MAX &&
      fcntl(job->w_out[fd].fd, F_SETPIPE_SZ, PIPE_LARGE_BYTES) >= 0) {
    job->pipe_grown[fd] = true;
    pipes_grown++;
  }
#endif
  if (first && n <= SMALL_OUTPUT_BYTES) {
    buf_put(b, hand.data, (size_t)n);
  } else if (first) {
    *b = hand;
    b->len = (size_t)n;
    memset(&hand, 0, sizeof hand);
  } else {
    b->len += (size_t)n;
  }
  job->collected_bytes += (size_t)n;
  return n;
}

/*
 * Bytes a streamed command's output may be ahead of the host's credit: the window while the command runs, twice that
 * once it exited (EXIT_TAIL_WINDOWS), so that what it left in its pipe (at most a pipe's capacity, 64 KiB by default
 * and 1 MiB at most for an unprivileged process) is read to its end without waiting for a reader who may never come.
 */
static double ahead_allowed(const struct job *job) {
  return job->exited ? job->window * EXIT_TAIL_WINDOWS : job->window;
}

/*
 * Streamed reading pauses while the host's window is full (less than a byte of it left: a window may be fractional),
 * and resumes (arming the grace) once it is not.
 */
void update_pause(struct job *job, int fd) {
  bool full = ahead_allowed(job) - job->unacked[fd] < 1;
  if (full == job->paused[fd]) return;
  job->paused[fd] = full;
  watch_set(&job->w_out[fd], full ? 0 : WANT_IN);
  if (!full) arm_grace(job);
}

/*
 * Whether output waits unread in a stream of the job's (what a grace that ran out must not lose: the loop may have
 * been held off the CPU between its poll and its timers while a grandchild wrote).
 */
bool output_waiting(struct job *job) {
  for (int fd = 1; fd <= 2; fd++) {
    /* A paused stream's unread output waits for credit, not for this loop: it does not count. */
    if (job->open[fd] && !job->paused[fd] && job->w_out[fd].fd >= 0 && unread_bytes(job->w_out[fd].fd) > 0) {
      return true;
    }
  }
  return false;
}

void read_output(struct job *job, int fd) {
  struct watch *w = &job->w_out[fd];
  if (!job->open[fd] || w->fd < 0) return;
  ssize_t n;
  if (job->buffered) {
    n = collect(job, fd);
  } else {
    double room = ahead_allowed(job) - job->unacked[fd];
    size_t max = room >= MAX_CHUNK_BYTES ? MAX_CHUNK_BYTES : (size_t)room;
    if (max == 0) {
      update_pause(job, fd);
      return;
    }
    uint8_t *p = frame_begin(max);
    n = read(w->fd, p, max);
    if (n > 0) {
      job->wrote[fd] = true;
      frame_end(fd == 1 ? F_STDOUT : F_STDERR, job->id, (size_t)n);
      job->unacked[fd] += (double)n;
      update_pause(job, fd);
      /* Streamed output counts against maxBuffer too (the Bun shape's, as Bun's): the command gets its killSignal. */
      job->total_bytes += (double)n;
      if (job->has_max_buffer && job->total_bytes > job->max_buffer && !job->exited) {
        stop_for(job, "maxBuffer", job->kill_signal);
      }
    }
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    close_stream(job, fd, !job->buffered);
    return;
  }
  if (job->exited) arm_grace(job);
}

static void ack_stdin(struct job *job, uint8_t status) {
  if (!job->done) send_frame(F_STDIN_ACK, job->id, &status, 1);
}

/* Writes queued stdin in order: StdinAck 0 for each write done, 1 once the child has closed its stdin. */
void drain_stdin(struct job *job) {
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

void queue_stdin(struct job *job, uint8_t *data, size_t len) {
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
