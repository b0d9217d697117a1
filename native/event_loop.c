/*
 * The event loop: the fds it waits on (watches, with epoll on Linux and poll() elsewhere), the timers of every job
 * (timeout, forced kill, grace), one dispatch per ready fd, and stop(), the worker's one way out.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * When a timer of `ms` milliseconds fires, as Node's setTimeout (serve.ts's timers) takes it: a delay below 1 or past
 * 2^31 - 1 ms (NaN included) is 1 ms.
 */
int64_t deadline_after(double ms) {
  if (!(ms >= 1 && ms <= 2147483647.0)) ms = 1;
  return now_us() + (int64_t)(ms * 1000);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Watches: the fds the loop waits on. */

#if USE_EPOLL
static int epoll_fd = -1;
#endif

void watch_set(struct watch *w, uint8_t events) {
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

void watch_close(struct watch *w) {
  if (w->fd < 0) return;
  watch_set(w, 0);
  close(w->fd);
  w->fd = -1;
}

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Creates what the loop waits with (an epoll instance; poll() needs nothing); false when it cannot. */
bool loop_init(void) {
#if USE_EPOLL
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  return epoll_fd >= 0;
#else
  return true;
#endif
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Stopping, timers, the loop */

void stop(int code) {
  static bool stopping;
  if (stopping) _exit(code);
  stopping = true;
  for (struct job *job = live; job != NULL; job = job->next) {
    if (!job->done && !job->detached) kill_group_for_good(job);
  }
  cgroup_cleanup();
  flush_out_at_exit();
  exit(code);
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
    if (job->linger_at && now >= job->linger_at) check_lingering(job);
    if (job->spawned_at > 0 && now >= job->spawned_at) send_spawned(job);
    if (job->grace_at && now >= job->grace_at) {
      job->grace_at = 0;
      /* Output that came after this turn's poll is read by the next one, which arms the grace again. */
      if (output_waiting(job)) {
        arm_grace(job);
        continue;
      }
      release_streams(job);
    }
  }
}

/* Milliseconds until the next timer, -1 when none. */
static int next_timeout_ms(void) {
  int64_t next = 0;
  for (struct job *job = live; job != NULL; job = job->next) {
    int64_t at[5] = {job->timeout_at, job->force_at, job->grace_at, job->linger_at, job->spawned_at > 0 ? job->spawned_at : 0};
    for (int i = 0; i < 5; i++) {
      if (at[i] && (next == 0 || at[i] < next)) next = at[i];
    }
  }
  if (next == 0) return -1;
  int64_t wait = (next - now_us() + 999) / 1000;
  if (wait < 0) return 0;
  return wait > INT_MAX ? INT_MAX : (int)wait;
}

#ifdef SPAWNPOOL_TEST_HOOKS
/*
 * Tests only (the sanitized build): with SPAWNPOOL_TEST_LOOP_STALL_MS set, the loop is held that long, once, between the
 * first poll after which a grace runs and the timers, as a worker left off the CPU there would be.
 */
static void test_stall(void) {
  static int stall_ms = -1;
  if (stall_ms < 0) {
    const char *value = getenv("SPAWNPOOL_TEST_LOOP_STALL_MS");
    stall_ms = value != NULL ? atoi(value) : 0;
  }
  if (stall_ms <= 0) return;
  for (struct job *job = live; job != NULL; job = job->next) {
    if (job->grace_at) {
      usleep((useconds_t)stall_ms * 1000);
      stall_ms = 0;
      return;
    }
  }
}
#endif

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

void loop(void) {
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
#ifdef SPAWNPOOL_TEST_HOOKS
    test_stall();
#endif
    run_timers();
  }
}
