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
#include "worker.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
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

  if (!signals_init()) return 1;
  if (!loop_init()) return 1;
  watch_set(&signal_watch, WANT_IN);
  watch_set(&channel, WANT_IN);

  char hello[96];
  int n = snprintf(hello, sizeof hello, "{\"version\":%d,\"runtime\":\"native\",\"pid\":%ld}", PROTOCOL_VERSION,
                   (long)getpid());
  send_frame(F_HELLO, 0, hello, (size_t)n);
  loop();
}
