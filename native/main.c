/*
 * spawnpool's native worker: serves a host's spawn requests over the binary frame protocol of core/frame.ts,
 * exactly as worker/serve.ts does for the JavaScript runtimes, from one thread and one event loop (epoll on
 * Linux, poll elsewhere). Started by a host with SPAWNPOOL_CHANNEL=fd3 (a connected socket on fd 3) or
 * SPAWNPOOL_CHANNEL=unix (SPAWNPOOL_BOOTSTRAP names a unix socket and a one-time secret).
 *
 * Everything the host sends is untrusted: a malformed frame closes the channel and the worker exits 1 after
 * killing its commands, as the JavaScript worker does on a ProtocolError. Every fd the worker opens is
 * close-on-exec, so commands inherit nothing of it.
 */
#include "worker.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif
#include <unistd.h>

/*
 * Marks every fd from 3 up close-on-exec: with close_range on Linux 5.11 and later (the system call itself: musl has
 * no wrapper), else fd by fd from the list of the open ones the system gives.
 */
static void cloexec_from_3(void) {
#if defined(__linux__) && defined(SYS_close_range) && !defined(SPAWNPOOL_TEST_FALLBACKS)
  if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) == 0) return;
#endif
#ifdef __linux__
  DIR *dir = opendir("/proc/self/fd");
#else
  DIR *dir = opendir("/dev/fd");
#endif
  if (dir == NULL) return;
  int own = dirfd(dir);
  for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
    char *end;
    long fd = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd < 3 || fd > INT_MAX || fd == own) continue;
    int flags = fcntl((int)fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) fcntl((int)fd, F_SETFD, flags | FD_CLOEXEC);
  }
  closedir(dir);
}

/* Writes `text` JSON-escaped into `out` (room for `size` bytes, a NUL included); returns the length written. */
static int json_escape(const char *text, char *out, size_t size) {
  size_t n = 0;
  for (const unsigned char *c = (const unsigned char *)text; *c != '\0' && n + 7 < size; c++) {
    if (*c == '"' || *c == '\\') {
      out[n++] = '\\';
      out[n++] = (char)*c;
    } else if (*c < 0x20) {
      n += (size_t)snprintf(out + n, size - n, "\\u%04x", *c);
    } else {
      out[n++] = (char)*c;
    }
  }
  out[n] = '\0';
  return (int)n;
}

/*
 * After a hello that says why this worker cannot serve: waits (at most 5 s) for the host to close the channel, so that
 * the host reads the reason before it sees this worker exit.
 */
static void wait_for_host_to_close(void) {
  int64_t until = now_us() + 5 * 1000 * 1000;
  for (;;) {
    int64_t left_ms = (until - now_us()) / 1000;
    if (left_ms <= 0) return;
    struct pollfd p = {channel.fd, POLLIN, 0};
    int r = poll(&p, 1, (int)left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    char discard[4096];
    ssize_t n = read(channel.fd, discard, sizeof discard);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
  }
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
  /* Whatever else this worker inherited (fd 3 is the channel, or taken below) reaches no command. */
  cloexec_from_3();
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
  /* A pool's `cgroup`: each command in a leaf of its own under it (cgroup.c); why it cannot be, told in the hello. */
  const char *cgroup = getenv("SPAWNPOOL_CGROUP");
  char cgroup_error[512] = "";
  if (cgroup != NULL && *cgroup != '\0' && !cgroup_init(cgroup, cgroup_error, sizeof cgroup_error)) {
    if (cgroup_error[0] == '\0') snprintf(cgroup_error, sizeof cgroup_error, "%s cannot be used", cgroup);
  } else {
    cgroup_error[0] = '\0'; /* a note on controllers the leaves lack is not an error */
  }
  /* Nothing of the worker's own plumbing reaches the commands it spawns. */
  unsetenv("SPAWNPOOL_CGROUP");
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
  channel_tune(channel.fd);

  if (!signals_init()) return 1;
  if (!loop_init()) return 1;
  watch_set(&signal_watch, WANT_IN);
  watch_set(&channel, WANT_IN);

  char hello[96 + 6 * sizeof cgroup_error];
  int n = snprintf(hello, sizeof hello, "{\"version\":%d,\"runtime\":\"native\",\"pid\":%ld", PROTOCOL_VERSION,
                   (long)getpid());
  if (cgroup_error[0] != '\0') {
    /* The host fails the worker's start with this message. */
    n += snprintf(hello + n, sizeof hello - (size_t)n, ",\"error\":\"cgroup: ");
    n += json_escape(cgroup_error, hello + n, sizeof hello - (size_t)n - 3);
    n += snprintf(hello + n, sizeof hello - (size_t)n, "\"}");
    send_frame(F_HELLO, 0, hello, (size_t)n);
    flush_out_at_exit();
    wait_for_host_to_close();
    return 1;
  }
  n += snprintf(hello + n, sizeof hello - (size_t)n, "}");
  send_frame(F_HELLO, 0, hello, (size_t)n);
  loop();
}
