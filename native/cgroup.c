/*
 * Cgroups (Linux, cgroup v2): with the pool's `cgroup` option (env SPAWNPOOL_CGROUP), every command runs in a leaf
 * cgroup of its own under that directory. It starts there (clone3 with CLONE_INTO_CGROUP), so nothing it forks can
 * leave before it is moved; whatever it leaves behind, setsid'd or reparented, ends with one write to the leaf's
 * cgroup.kill; and its usage comes from the leaf's counters. Leaves are reused from a free list: a leaf's directory,
 * "<root>/spawnpool-<worker pid>-<n>", is made once, for the first command that finds no free leaf, and removed at the
 * worker's exit (cgroup_cleanup), so the spawn path makes no directory.
 *
 * What older kernels lack, and what stands in for it:
 *   clone3 with CLONE_INTO_CGROUP (5.7)   fork, then the child moves itself (a migration, before it runs the command)
 *   cgroup.kill (5.14)                    freeze, SIGKILL each process of cgroup.procs, thaw
 *   cgroup.freeze (5.2)                   SIGKILL each process of cgroup.procs, a few rounds (racing with forks)
 *   memory.peak (5.19)                    no peak
 *   memory.peak reset per fd (6.12)       a peak for a leaf's first command only
 * SPAWNPOOL_TEST_FALLBACKS builds take the first two fallbacks whatever the kernel.
 *
 * And what newer kernels get wrong: since cgroup.kill counts its kills (kill_seq: a fix of a race between fork and
 * cgroup.kill, in 6.14 and backported), clone3 notes the count of the parent's cgroup where it means the target's, and
 * SIGKILLs the child when that differs from the target's count after the fork. So a child started in a cgroup that
 * was ever written cgroup.kill dies at once (seen on 6.18.44). cgroup_init tries it; where it is so, a leaf written
 * cgroup.kill is removed once empty (retire()), not reused, and a new one made in its place.
 *
 * On other systems every function is a stub: cgroup_init fails with "cgroups are Linux-only".
 */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__

#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * From <linux/magic.h> and <linux/sched.h>, which not every C library's headers include (and <linux/sched.h> clashes
 * with <sched.h> in some): the kernel's ABI, which does not change.
 */
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* The kernel's struct clone_args up to its `cgroup` field (CLONE_ARGS_SIZE_VER2): every field a 64-bit integer. */
struct clone3_args {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
_Static_assert(sizeof(struct clone3_args) == 88, "struct clone_args, version 2, is 88 bytes");

/* The most a leaf's pids.max takes (the kernel's PID_MAX_LIMIT); a larger limit is no limit. */
#define PIDS_LIMIT 4194304ULL
/* How long the worker waits for a leaf to freeze before it signals it, and for its leaves to empty at its exit. */
#define FREEZE_WAIT_US (100 * 1000)
#define CLEANUP_WAIT_US (1000 * 1000)

enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_COUNT };
static const char *const CONTROLLERS[CG_COUNT] = {"memory", "pids", "cpu"};

/* A slot of the leaf table: a leaf, or vacant (fd -1), its index then on the vacant list for the next new leaf. */
struct leaf {
  int fd;          /* the leaf's directory, O_PATH: clone3's cgroup, and the base of every openat; -1: vacant */
  int peak_fd;     /* its memory.peak, open while it exists (a reset holds for one open file only); -1: none */
  unsigned serial; /* the n of its name */
  int next_free;   /* the next leaf of the free list (or slot of the vacant list), or -1 */
  bool in_use;
  bool stale;       /* given back still populated: its processes were killed, but may still be exiting */
  bool spoiled;     /* written cgroup.kill, on a kernel that then kills what clone3 starts in it: see retire() */
  bool peak_resets; /* a write to peak_fd resets the peak it reads (Linux 6.12+) */
  bool peak_valid;  /* peak_fd's peak is this command's: a fresh leaf, or one whose peak was reset */
  bool memory_limited, pids_limited; /* memory.max or pids.max set by a command: reset for the next one */
  struct cgroup_usage base;          /* the counters when the leaf was last empty: see settle() */
};

static int root_fd = -1;
static pid_t worker_pid;
static unsigned next_serial;
static struct leaf *leaves;
static int leaf_count, leaf_cap;
static int free_head = -1, vacant_head = -1;
static bool leaves_have[CG_COUNT];
static bool kill_spoils; /* whether a cgroup.kill spoils a leaf for clone3: see the top of this file */
#ifdef SPAWNPOOL_TEST_FALLBACKS
static bool use_clone3 = false, use_kill_file = false;
#else
static bool use_clone3 = true, use_kill_file = true;
#endif

/* ---------------------------------------------------------------------------------------------------------- */
/* Cgroup files: small texts, each read or written whole. */

/*
 * Reads a small cgroup file from its start into `text`, NUL-terminated. A cgroup file makes its text afresh at offset
 * 0, so one fd can be read again and again (memory.peak must be: its reset holds for that fd). False with errno.
 */
static bool read_text(int fd, char *text, size_t size) {
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
static bool read_at(int dir, const char *name, char *text, size_t size) {
  int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = read_text(fd, text, size);
  int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

/* Writes `text` to the cgroup file `name` of the cgroup `dir` in one write, as the kernel wants; false with errno. */
static bool write_at(int dir, const char *name, const char *text) {
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
static bool keyed(const char *text, const char *key, unsigned long long *value) {
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
static bool has_word(const char *text, const char *word) {
  size_t len = strlen(word);
  for (const char *p = text; (p = strstr(p, word)) != NULL; p += len) {
    bool starts = p == text || p[-1] == ' ';
    bool ends = p[len] == '\0' || p[len] == ' ' || p[len] == '\n';
    if (starts && ends) return true;
  }
  return false;
}

/* Whether the cgroup's cgroup.events shows `key` as 1: "populated" while any process is in it, "frozen" once frozen. */
static bool event_is_set(int dir, const char *key) {
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
static bool wait_event(int dir, const char *key, bool set, int64_t until) {
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
static int signal_procs(int dir, int sig) {
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
static int freeze(int dir) {
  if (!write_at(dir, "cgroup.freeze", "1")) return -1;
  return wait_event(dir, "frozen", true, now_us() + FREEZE_WAIT_US) ? 1 : 0;
}

static void thaw(int dir) {
  write_at(dir, "cgroup.freeze", "0");
}

/*
 * SIGKILLs every process of the cgroup (cgroup.kill: also in cgroups below it, which a command run as root may make).
 * True if through cgroup.kill.
 */
static bool kill_all(int dir) {
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

/* ---------------------------------------------------------------------------------------------------------- */
/* Leaves. */

static struct leaf *leaf_at(int leaf) {
  return leaf >= 0 && leaf < leaf_count && leaves[leaf].fd >= 0 ? &leaves[leaf] : NULL;
}

static void kill_leaf(struct leaf *l) {
  if (kill_all(l->fd) && kill_spoils) l->spoiled = true;
}

static void leaf_name(char *name, size_t size, unsigned serial) {
  snprintf(name, size, "spawnpool-%ld-%u", (long)worker_pid, serial);
}

/*
 * Makes a leaf directory under the root; its O_PATH fd, and its serial in `serial`, or -1 with errno. A name taken
 * already is skipped, not reused: a worker that died with this pid, or one in another pid namespace sharing the root,
 * may have left it, with processes in it.
 */
static int make_dir(unsigned *serial) {
  char name[64];
  for (int tries = 0;; tries++) {
    *serial = next_serial++;
    leaf_name(name, sizeof name, *serial);
    if (mkdirat(root_fd, name, 0755) == 0) break;
    if (errno != EEXIST || tries == 100) return -1;
  }
  int fd = openat(root_fd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int saved = errno;
    unlinkat(root_fd, name, AT_REMOVEDIR);
    errno = saved;
    return -1;
  }
  /* A command may not make cgroups inside its leaf: the leaf could then never be removed, nor its slot reused. */
  write_at(fd, "cgroup.max.descendants", "0");
  return fd;
}

/*
 * Removes the leaf directory `serial` (its fd `dir` still open to watch it): it must be empty, and processes just
 * killed may still be exiting, so a refusal (EBUSY) waits for "populated 0", until `until`. False with errno if it
 * stays: a process stuck in an uninterruptible sleep, or a cgroup a command made inside its leaf.
 */
static bool remove_dir(int dir, unsigned serial, int64_t until) {
  char name[64];
  leaf_name(name, sizeof name, serial);
  for (bool waited = false;; waited = true) {
    if (unlinkat(root_fd, name, AT_REMOVEDIR) == 0) return true;
    if (errno != EBUSY || waited) return false;
    if (!wait_event(dir, "populated", false, until)) {
      errno = EBUSY;
      return false;
    }
  }
}

/* cpu.stat's three times (always there in cgroup v2), memory.events' oom_kill and pids.events' max (if controlled). */
static void read_counters(int dir, struct cgroup_usage *counters) {
  memset(counters, 0, sizeof *counters);
  char text[1024];
  if (read_at(dir, "cpu.stat", text, sizeof text)) {
    keyed(text, "usage_usec", &counters->usage_us);
    keyed(text, "user_usec", &counters->user_us);
    keyed(text, "system_usec", &counters->system_us);
  }
  if (leaves_have[CG_MEMORY] && read_at(dir, "memory.events", text, sizeof text)) {
    keyed(text, "oom_kill", &counters->oom_kills);
  }
  if (leaves_have[CG_PIDS] && read_at(dir, "pids.events", text, sizeof text)) {
    keyed(text, "max", &counters->pids_max_events);
  }
}

static unsigned long long since(unsigned long long now, unsigned long long base) {
  return now > base ? now - base : 0;
}

/*
 * Makes an empty leaf ready for its next command. Its counters (cpu.stat, memory.events, pids.events) count from the
 * leaf's creation, so their values now are the base cgroup_leaf_usage subtracts. (A process's last microseconds of
 * exiting, after it left the populated count, can still land in them.) Its memory.peak is reset through the leaf's own
 * fd where the kernel allows that (Linux 6.12+: a write resets the peak that fd reads, to the leaf's memory at that
 * moment, which includes the page cache earlier commands left charged to it); elsewhere the peak counts from the
 * leaf's creation, and is reported for its first command only.
 */
static void settle(struct leaf *l) {
  read_counters(l->fd, &l->base);
  l->peak_valid = l->peak_resets && write(l->peak_fd, "0", 1) == 1;
  l->stale = false;
}

/* Opens a new leaf's memory.peak: writable where a write resets it (Linux 6.12+; before, the file is read-only). */
static void open_peak(struct leaf *l) {
  l->peak_fd = openat(l->fd, "memory.peak", O_RDWR | O_CLOEXEC);
  l->peak_resets = l->peak_fd >= 0;
  if (l->peak_fd < 0 && errno == EACCES) l->peak_fd = openat(l->fd, "memory.peak", O_RDONLY | O_CLOEXEC);
  l->peak_valid = l->peak_fd >= 0;
}

/* A new leaf, in a vacant slot or at the end of the table, its counters at zero; its index, or -1 with errno. */
static int make_leaf(void) {
  unsigned serial;
  int fd = make_dir(&serial);
  if (fd < 0) return -1;
  int index = vacant_head;
  if (index >= 0) {
    vacant_head = leaves[index].next_free;
  } else {
    if (leaf_count == leaf_cap) {
      leaf_cap = leaf_cap ? leaf_cap * 2 : 16;
      leaves = xrealloc(leaves, (size_t)leaf_cap * sizeof *leaves);
    }
    index = leaf_count++;
  }
  struct leaf *l = &leaves[index];
  memset(l, 0, sizeof *l);
  l->fd = fd;
  l->peak_fd = -1;
  l->serial = serial;
  l->next_free = -1;
  if (leaves_have[CG_MEMORY]) open_peak(l);
  return index;
}

/*
 * Removes an empty, spoiled leaf, and frees its slot for a new one. One that will not go (a cgroup a command made
 * inside it) keeps its slot, on no list, for cgroup_cleanup to try again.
 */
static void retire(int leaf) {
  struct leaf *l = &leaves[leaf];
  if (!remove_dir(l->fd, l->serial, now_us())) return;
  close(l->fd);
  if (l->peak_fd >= 0) close(l->peak_fd);
  l->fd = l->peak_fd = -1;
  l->next_free = vacant_head;
  vacant_head = leaf;
}

/*
 * The free leaf given back last (LIFO); one given back still populated only once it is empty (and a spoiled one, once
 * empty, is retired instead). -1: none.
 */
static int take_free(void) {
  for (int *link = &free_head; *link >= 0;) {
    int index = *link;
    struct leaf *l = &leaves[index];
    if (l->stale && event_is_set(l->fd, "populated")) {
      link = &l->next_free;
      continue;
    }
    *link = l->next_free;
    l->next_free = -1;
    if (l->spoiled) {
      retire(index);
      continue;
    }
    if (l->stale) settle(l);
    return index;
  }
  return -1;
}

static void put_free(int leaf) {
  leaves[leaf].next_free = free_head;
  free_head = leaf;
}

/* Sets a leaf's memory.max or pids.max to `value`; 0 is "max", written only if an earlier command set a limit. */
static bool set_limit(int dir, const char *name, unsigned long long value, bool *limited) {
  if (value == 0 && !*limited) return true;
  char text[32];
  if (value == 0) snprintf(text, sizeof text, "max");
  else snprintf(text, sizeof text, "%llu", value);
  if (!write_at(dir, name, text)) return false;
  *limited = value > 0;
  return true;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Starting a process in a leaf. */

/*
 * Where clone3 cannot start the child in the leaf (a kernel before 5.7, or a seccomp filter refusing clone3, as
 * container runtimes' did): fork, and the child moves itself by writing "0" to the leaf's cgroup.procs before it
 * returns. That is a migration, with its costs (the child's memory charged so far stays charged to the worker's
 * cgroup; the move takes the kernel's cgroup locks), but the child has not run the command yet, so nothing of the
 * command starts outside the leaf. The child tells the errno of its write through a pipe the worker waits on: a child
 * that could not move exits at once, unseen, and the fork fails with that errno.
 */
static pid_t fork_and_move(int dir) {
  int procs = openat(dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
  if (procs < 0) return -1;
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    int saved = errno;
    close(procs);
    errno = saved;
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(report[0]);
    int failed = write(procs, "0", 1) == 1 ? 0 : errno;
    close(procs);
    if (write(report[1], &failed, sizeof failed) < 0) failed = failed ? failed : EIO;
    close(report[1]);
    if (failed) _exit(127);
    return 0;
  }
  int saved = errno;
  close(procs);
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    errno = saved;
    return -1;
  }
  int failed = 0;
  ssize_t n;
  while ((n = read(report[0], &failed, sizeof failed)) < 0 && errno == EINTR) {}
  close(report[0]);
  if (n != (ssize_t)sizeof failed) failed = failed ? failed : EIO; /* it died before it could tell */
  if (failed) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    errno = failed;
    return -1;
  }
  return pid;
}

/*
 * fork(), but the child starts in the cgroup `dir`: clone3 with CLONE_INTO_CGROUP and no CLONE_VM, so the child gets
 * a copy of the worker's memory, as fork's. The system call itself, not the C library's fork: no atfork handlers, and
 * the child's C library state (its cached thread id) is the worker's, so the child must only make system calls until
 * it execs or _exits, as a vfork child does. ENOSYS (before 5.3, or a seccomp filter), E2BIG (5.3 to 5.6: no `cgroup`
 * field) and EPERM (older Docker's seccomp profile) make it fall back to fork_and_move for good.
 */
static pid_t fork_into_dir(int dir) {
#ifdef SYS_clone3
  if (use_clone3) {
    struct clone3_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)dir;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid >= 0) return (pid_t)pid;
    if (errno != ENOSYS && errno != E2BIG && errno != EPERM) return -1;
    use_clone3 = false;
  }
#endif
  return fork_and_move(dir);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The root. */

__attribute__((format(printf, 3, 4))) static bool fail(char *why, size_t why_len, const char *format, ...) {
  if (why_len > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(why, why_len, format, args);
    va_end(args);
  }
  return false;
}

/*
 * Enables for the root's children those of memory, pids and cpu it has (cgroup.controllers), one write each (one
 * write of several is all or nothing), and records which the leaves have. Failures are not the worker's: a command
 * asking for a limit its leaves cannot have fails (ENOTSUP), and `note` says why they lack it, or is left empty.
 */
static void enable_controllers(const char *path, char *note, size_t note_len) {
  char available[512] = "", enabled[512] = "";
  read_at(root_fd, "cgroup.controllers", available, sizeof available);
  read_at(root_fd, "cgroup.subtree_control", enabled, sizeof enabled);
  int refused = 0;
  for (int c = 0; c < CG_COUNT; c++) {
    char change[16];
    snprintf(change, sizeof change, "+%s", CONTROLLERS[c]);
    if (has_word(available, CONTROLLERS[c]) && !has_word(enabled, CONTROLLERS[c]) &&
        !write_at(root_fd, "cgroup.subtree_control", change)) {
      refused = errno;
    }
  }
  read_at(root_fd, "cgroup.subtree_control", enabled, sizeof enabled);
  char lacking[64] = "";
  bool refused_one = false; /* of those lacking, one the root has */
  for (int c = 0; c < CG_COUNT; c++) {
    leaves_have[c] = has_word(enabled, CONTROLLERS[c]);
    if (leaves_have[c]) continue;
    refused_one = refused_one || has_word(available, CONTROLLERS[c]);
    if (lacking[0] != '\0') strcat(lacking, ", ");
    strcat(lacking, CONTROLLERS[c]);
  }
  if (lacking[0] == '\0') return;
  if (refused_one && refused == EBUSY) {
    snprintf(note, note_len,
             "the leaves lack the controllers %s: %s has processes of its own: a cgroup with controllers enabled for "
             "its children cannot hold processes",
             lacking, path);
  } else if (refused_one) {
    snprintf(note, note_len, "the leaves lack the controllers %s: %s/cgroup.subtree_control refused them: %s", lacking,
             path, strerror(refused ? refused : EINVAL));
  } else {
    snprintf(note, note_len,
             "the leaves lack the controllers %s: %s does not have them (its parent's cgroup.subtree_control does not "
             "enable them)",
             lacking, path);
  }
}

/*
 * Starts a process in the cgroup `dir` that _exits at once, and reaps it; 0, or the errno of the start. `killed`:
 * whether it died of a SIGKILL instead. The worker's signals are blocked meanwhile: the child must not run a handler of
 * the worker's.
 */
static int start_and_reap(int dir, bool *killed) {
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork_into_dir(dir);
  if (pid == 0) _exit(0);
  int err = pid < 0 ? errno : 0;
  sigprocmask(SIG_SETMASK, &old, NULL);
  int status = 0;
  if (pid > 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  }
  *killed = pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  return err;
}

/*
 * Tries, in a leaf made for it and removed after, what the worker will do under the root. Whether it may start
 * processes there at all: that takes more than a writable directory (write access to cgroup.procs of the closest
 * cgroup holding both the worker's own cgroup and the root). And what this kernel's clone3 does (see the top of this
 * file): if it kills a child in a fresh leaf (the worker's own cgroup was once written cgroup.kill), clone3 is given
 * up for the migration; if it kills a child in a leaf once written cgroup.kill, such a leaf is not reused
 * (kill_spoils). 0; -errno if no leaf could be made; the errno of a start; ECHILD if even a migrated child is killed.
 */
static int try_placing(void) {
  unsigned serial;
  int dir = make_dir(&serial);
  if (dir < 0) return -errno;
  bool killed;
  int err = start_and_reap(dir, &killed);
  if (err == 0 && killed && use_clone3) {
    use_clone3 = false;
    err = start_and_reap(dir, &killed);
  }
  if (err == 0 && killed) err = ECHILD;
  if (err == 0 && use_clone3 && write_at(dir, "cgroup.kill", "1")) {
    err = start_and_reap(dir, &kill_spoils);
  }
  remove_dir(dir, serial, now_us() + CLEANUP_WAIT_US);
  close(dir);
  return err;
}

/* The reason for try_placing's errno, with what usually causes it. */
static bool placing_failed(const char *path, int err, char *why, size_t why_len) {
  const char *hint = "";
  if (err == EACCES || err == EPERM) {
    hint = " (this needs write access to cgroup.procs of the closest cgroup holding both the worker's own cgroup and "
           "it)";
  } else if (err == EOPNOTSUPP) {
    hint = " (a threaded cgroup's children cannot hold processes: see its cgroup.type)";
  } else if (err == ECHILD) {
    return fail(why, why_len, "a process started in a cgroup under %s is killed at once", path);
  }
  return fail(why, why_len, "cannot start a process in a cgroup under %s: %s%s", path, strerror(err), hint);
}

bool cgroup_init(const char *path, char *why, size_t why_len) {
  if (why_len > 0) why[0] = '\0';
  cgroup_cleanup();
  if (path[0] != '/') return fail(why, why_len, "%s is not an absolute path", path);
  /* O_PATH: a directory this worker may write in but not list is still one to use. */
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return fail(why, why_len, "%s does not exist", path);
    if (errno == ENOTDIR) return fail(why, why_len, "%s is not a directory", path);
    return fail(why, why_len, "cannot open %s: %s", path, strerror(errno));
  }
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0 || (unsigned long)fs.f_type != (unsigned long)CGROUP2_SUPER_MAGIC) {
    bool v1 = (unsigned long)fs.f_type == (unsigned long)CGROUP_SUPER_MAGIC;
    close(fd);
    if (v1) return fail(why, why_len, "%s is a cgroup v1 directory, not a cgroup v2 one", path);
    return fail(why, why_len, "%s is not a cgroup v2 directory", path);
  }
  root_fd = fd;
  worker_pid = getpid();
  char note[512] = "";
  enable_controllers(path, note, sizeof note);
  int err = try_placing();
  if (err != 0) {
    close(root_fd);
    root_fd = -1;
    if (err < 0) {
      err = -err;
      if (err == EACCES || err == EPERM || err == EROFS) {
        return fail(why, why_len, "%s is not writable: %s", path, strerror(err));
      }
      return fail(why, why_len, "cannot make a cgroup in %s: %s", path, strerror(err));
    }
    return placing_failed(path, err, why, why_len);
  }
  /* A success's `why` is the note on missing controllers, if any. */
  if (why_len > 0) snprintf(why, why_len, "%s", note);
  return true;
}

bool cgroup_enabled(void) {
  return root_fd >= 0;
}

bool cgroup_has(const char *controller) {
  for (int c = 0; c < CG_COUNT; c++) {
    if (strcmp(controller, CONTROLLERS[c]) == 0) return root_fd >= 0 && leaves_have[c];
  }
  return false;
}

int cgroup_leaf_take(unsigned long long memory_max, unsigned long long pids_max) {
  if (root_fd < 0 || (memory_max > 0 && !leaves_have[CG_MEMORY]) || (pids_max > 0 && !leaves_have[CG_PIDS])) {
    errno = ENOTSUP;
    return -1;
  }
  int index = take_free();
  if (index < 0 && (index = make_leaf()) < 0) return -1;
  struct leaf *l = &leaves[index];
  if (!set_limit(l->fd, "memory.max", memory_max, &l->memory_limited) ||
      !set_limit(l->fd, "pids.max", pids_max > PIDS_LIMIT ? 0 : pids_max, &l->pids_limited)) {
    int saved = errno;
    put_free(index);
    errno = saved;
    return -1;
  }
  l->in_use = true;
  return index;
}

int cgroup_leaf_fd(int leaf) {
  struct leaf *l = leaf_at(leaf);
  if (l == NULL) errno = EBADF;
  return l ? l->fd : -1;
}

pid_t cgroup_fork_into(int leaf) {
  struct leaf *l = leaf_at(leaf);
  if (l == NULL) {
    errno = EBADF;
    return -1;
  }
  return fork_into_dir(l->fd);
}

void cgroup_leaf_kill(int leaf) {
  struct leaf *l = leaf_at(leaf);
  if (l != NULL) kill_leaf(l);
}

void cgroup_leaf_signal(int leaf, int sig) {
  if (sig == SIGKILL) {
    cgroup_leaf_kill(leaf);
    return;
  }
  struct leaf *l = leaf_at(leaf);
  if (l == NULL || sig == 0) return;
  int frozen = freeze(l->fd);
  signal_procs(l->fd, sig);
  if (frozen >= 0) thaw(l->fd);
}

bool cgroup_leaf_populated(int leaf) {
  struct leaf *l = leaf_at(leaf);
  return l != NULL && event_is_set(l->fd, "populated");
}

void cgroup_leaf_usage(int leaf, struct cgroup_usage *usage) {
  memset(usage, 0, sizeof *usage);
  struct leaf *l = leaf_at(leaf);
  if (l == NULL) return;
  struct cgroup_usage now;
  read_counters(l->fd, &now);
  usage->usage_us = since(now.usage_us, l->base.usage_us);
  usage->user_us = since(now.user_us, l->base.user_us);
  usage->system_us = since(now.system_us, l->base.system_us);
  usage->oom_kills = since(now.oom_kills, l->base.oom_kills);
  usage->pids_max_events = since(now.pids_max_events, l->base.pids_max_events);
  char text[32];
  if (l->peak_valid && read_text(l->peak_fd, text, sizeof text)) {
    usage->memory_peak = strtoull(text, NULL, 10);
    usage->has_memory_peak = true;
  }
}

/*
 * Puts the leaf on the free list. One still populated (a daemon the command left, a grandchild holding no stream) is
 * killed first; its processes may take a moment to exit, so it is settled (or retired) when next taken, once empty,
 * not now. An empty one that was spoiled is retired now.
 */
void cgroup_leaf_give_back(int leaf) {
  struct leaf *l = leaf_at(leaf);
  if (l == NULL || !l->in_use) return;
  l->in_use = false;
  if (event_is_set(l->fd, "populated")) {
    kill_leaf(l);
    l->stale = true;
  } else if (l->spoiled) {
    retire(leaf);
    return;
  } else {
    settle(l);
  }
  put_free(leaf);
}

void cgroup_cleanup(void) {
  if (root_fd < 0) return;
  /* Every leaf killed first, so that their processes exit together, then each removed once empty. */
  for (int i = 0; i < leaf_count; i++) {
    if (leaves[i].fd >= 0 && event_is_set(leaves[i].fd, "populated")) kill_all(leaves[i].fd);
  }
  int64_t until = now_us() + CLEANUP_WAIT_US;
  for (int i = 0; i < leaf_count; i++) {
    if (leaves[i].fd < 0) continue;
    remove_dir(leaves[i].fd, leaves[i].serial, until);
    close(leaves[i].fd);
    if (leaves[i].peak_fd >= 0) close(leaves[i].peak_fd);
  }
  free(leaves);
  leaves = NULL;
  leaf_count = leaf_cap = 0;
  free_head = vacant_head = -1;
  kill_spoils = false;
  memset(leaves_have, 0, sizeof leaves_have);
  close(root_fd);
  root_fd = -1;
}

#else

bool cgroup_init(const char *path, char *why, size_t why_len) {
  (void)path;
  if (why_len > 0) snprintf(why, why_len, "cgroups are Linux-only");
  return false;
}

bool cgroup_enabled(void) {
  return false;
}

bool cgroup_has(const char *controller) {
  (void)controller;
  return false;
}

int cgroup_leaf_take(unsigned long long memory_max, unsigned long long pids_max) {
  (void)memory_max;
  (void)pids_max;
  errno = ENOTSUP;
  return -1;
}

int cgroup_leaf_fd(int leaf) {
  (void)leaf;
  errno = EBADF;
  return -1;
}

pid_t cgroup_fork_into(int leaf) {
  (void)leaf;
  errno = ENOTSUP;
  return -1;
}

void cgroup_leaf_kill(int leaf) {
  (void)leaf;
}

void cgroup_leaf_signal(int leaf, int sig) {
  (void)leaf;
  (void)sig;
}

bool cgroup_leaf_populated(int leaf) {
  (void)leaf;
  return false;
}

void cgroup_leaf_usage(int leaf, struct cgroup_usage *usage) {
  (void)leaf;
  memset(usage, 0, sizeof *usage);
}

void cgroup_leaf_give_back(int leaf) {
  (void)leaf;
}

void cgroup_cleanup(void) {}

#endif
