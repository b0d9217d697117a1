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
 * The files: cgroup.c the leaves and their API (worker.h), cgroup_root.c the root (cgroup_init), cgroup_fork.c
 * starting a process in a leaf, cgroup_files.c a cgroup's files, cgroup.h what they share. On other systems every
 * function is a stub (cgroup_stubs.c): cgroup_init fails with "cgroups are Linux-only".
 */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__

#include "cgroup.h"

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

static unsigned next_serial;
static struct leaf *leaves;
static int leaf_count, leaf_cap;
static int free_head = -1, vacant_head = -1;

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
int make_dir(unsigned *serial) {
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
bool remove_dir(int dir, unsigned serial, int64_t until) {
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

#endif
