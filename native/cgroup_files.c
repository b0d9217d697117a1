/* A cgroup's files (cgroup.h): reading and writing its small texts, its events, and signalling, freezing and killing
 * what it holds. */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__

#include "cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef SPAWNPOOL_TEST_FALLBACKS
bool use_kill_file = false;
#else
bool use_kill_file = true;
#endif

/* ---------------------------------------------------------------------------------------------------------- */
/* Cgroup files: small texts, each read or written whole. */

/*
 * Reads a small cgroup file from its start into `text`, NUL-terminated. A cgroup file makes its text afresh at offset
 * 0, so one fd can be read again and again (memory.peak must be: its reset holds for that fd). False with errno.
 */
bool read_text(int fd, char *text, size_t size) {
  size_t len = 0;
  while (len < size - 1) {
    ssize_t n = pread(fd, text + len, size - 1 - len, (off_t)len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    len += (size_t)n;
  }
  text[len] = '\0';
  return true;
}

/* Reads the cgroup file `name` of the cgroup `dir` (an fd) into `text`; false with errno. */
bool read_at(int dir, const char *name, char *text, size_t size) {
  int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = read_text(fd, text, size);
  int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

/* Writes `text` to the cgroup file `name` of the cgroup `dir` in one write, as the kernel wants; false with errno. */
bool write_at(int dir, const char *name, const char *text) {
  int fd = openat(dir, name, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t len = strlen(text);
  ssize_t n = write(fd, text, len);
  int saved = n < 0 ? errno : EIO;
  close(fd);
  if (n == (ssize_t)len) return true;
  errno = saved;
  return false;
}

/* The number after `key` in a flat-keyed text ("key value" lines: cpu.stat, cgroup.events); false without the key. */
bool keyed(const char *text, const char *key, unsigned long long *value) {
  size_t key_len = strlen(key);
  for (const char *line = text; *line != '\0';) {
    if (strncmp(line, key, key_len) == 0 && line[key_len] == ' ') {
      *value = strtoull(line + key_len + 1, NULL, 10);
      return true;
    }
    const char *end = strchr(line, '\n');
    if (end == NULL) break;
    line = end + 1;
  }
  return false;
}

/* Whether the space-separated list `text` (cgroup.controllers, cgroup.subtree_control) holds `word`. */
bool has_word(const char *text, const char *word) {
  size_t len = strlen(word);
  for (const char *p = text; (p = strstr(p, word)) != NULL; p += len) {
    bool starts = p == text || p[-1] == ' ';
    bool ends = p[len] == '\0' || p[len] == ' ' || p[len] == '\n';
    if (starts && ends) return true;
  }
  return false;
}

/* Whether the cgroup's cgroup.events shows `key` as 1: "populated" while any process is in it, "frozen" once frozen. */
bool event_is_set(int dir, const char *key) {
  char text[128];
  unsigned long long value = 0;
  return read_at(dir, "cgroup.events", text, sizeof text) && keyed(text, key, &value) && value == 1;
}

/*
 * Waits until the cgroup's cgroup.events shows `key` as `set`, or until `until` (now_us()); true if it did. The kernel
 * tells a reader of cgroup.events of a change with POLLPRI, but at most once in 10 ms (CGROUP_FILE_NOTIFY_MIN_INTV): a
 * freeze that took 50 us was told after 7.6 ms here. So it reads again after 20 us, then twice as long each time, up
 * to 1 ms, waking early if told.
 */
bool wait_event(int dir, const char *key, bool set, int64_t until) {
  int fd = openat(dir, "cgroup.events", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool seen = false;
  for (int64_t step = 20;; step = step < 500 ? step * 2 : 1000) {
    char text[128];
    unsigned long long value = 0;
    if (!read_text(fd, text, sizeof text)) break;
    if (keyed(text, key, &value) && (value == 1) == set) {
      seen = true;
      break;
    }
    int64_t left = until - now_us();
    if (left <= 0) break;
    if (step > left) step = left;
    struct pollfd p = {.fd = fd, .events = POLLPRI};
    struct timespec wait = {.tv_sec = 0, .tv_nsec = (long)step * 1000};
    ppoll(&p, 1, &wait, NULL);
  }
  close(fd);
  return seen;
}

/*
 * Sends `sig` to every process in the cgroup's cgroup.procs; how many there were. Pids it lists as 0 (in another pid
 * namespace) are skipped. Without the cgroup frozen, a process may fork or exit (its pid reused) meanwhile.
 */
int signal_procs(int dir, int sig) {
  int fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int count = 0;
  long pid = 0;
  char chunk[4096];
  ssize_t n;
  /* A pid can straddle two reads: its digits carry over in `pid`. */
  while ((n = read(fd, chunk, sizeof chunk)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (ssize_t i = 0; i < n; i++) {
      if (chunk[i] >= '0' && chunk[i] <= '9' && pid < 100000000) {
        pid = pid * 10 + (chunk[i] - '0');
      } else {
        if (pid > 0 && kill((pid_t)pid, sig) == 0) count++;
        pid = 0;
      }
    }
  }
  if (pid > 0 && kill((pid_t)pid, sig) == 0) count++;
  close(fd);
  return count;
}

/*
 * Freezes the cgroup (cgroup.freeze, Linux 5.2+): once it shows "frozen 1", no process in it runs, so none forks or
 * exits (its pid reused) while cgroup.procs is read and signalled. A frozen process still takes signals, a SIGKILL
 * at once and the others when thawed. The wait is bounded (FREEZE_WAIT_US), the worker's loop waiting meanwhile: a
 * process in an uninterruptible sleep holds a freeze up. -1 without cgroup.freeze, 0 if it did not freeze in time, 1
 * if frozen; 0 and 1 need a thaw().
 */
int freeze(int dir) {
  if (!write_at(dir, "cgroup.freeze", "1")) return -1;
  return wait_event(dir, "frozen", true, now_us() + FREEZE_WAIT_US) ? 1 : 0;
}

void thaw(int dir) {
  write_at(dir, "cgroup.freeze", "0");
}

/*
 * SIGKILLs every process of the cgroup (cgroup.kill: also in cgroups below it, which a command run as root may make).
 * True if through cgroup.kill.
 */
bool kill_all(int dir) {
  if (use_kill_file) {
    if (write_at(dir, "cgroup.kill", "1")) return true;
    if (errno != ENOENT) return false;
    use_kill_file = false; /* before Linux 5.14 */
  }
  int frozen = freeze(dir);
  /* Unfrozen, a process may fork between the read and the kill: a few rounds catch what they can. */
  for (int round = 0; signal_procs(dir, SIGKILL) > 0 && frozen != 1 && round < 3; round++) {}
  if (frozen >= 0) thaw(dir);
  return false;
}

#endif
