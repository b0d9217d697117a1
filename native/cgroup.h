/*
 * What the cgroup files share (Linux only): cgroup.c (the leaves), cgroup_files.c (reading and writing a cgroup's
 * files), cgroup_fork.c (starting a process in a leaf) and cgroup_root.c (the root, cgroup_init). Their API to the rest
 * of the worker is in worker.h; cgroup_stubs.c is that API on other systems.
 */
#ifndef SPAWNPOOL_CGROUP_H
#define SPAWNPOOL_CGROUP_H

#include "worker.h"

/* The most a leaf's pids.max takes (the kernel's PID_MAX_LIMIT); a larger limit is no limit. */
#define PIDS_LIMIT 4194304ULL
/* How long the worker waits for a leaf to freeze before it signals it, and for its leaves to empty at its exit. */
#define FREEZE_WAIT_US (100 * 1000)
#define CLEANUP_WAIT_US (1000 * 1000)

enum { CG_MEMORY, CG_PIDS, CG_CPU, CG_COUNT };
extern const char *const CONTROLLERS[CG_COUNT];

/* cgroup_root.c */
extern int root_fd;      /* the root, O_PATH; -1 while cgroups are off */
extern pid_t worker_pid; /* in the leaves' names */
extern bool leaves_have[CG_COUNT];
extern bool kill_spoils; /* whether a cgroup.kill spoils a leaf for clone3: see the top of cgroup.c */

/* cgroup_files.c */
extern bool use_kill_file; /* cgroup.kill, until a kernel before 5.14 says it has none */
bool read_text(int fd, char *text, size_t size);
bool read_at(int dir, const char *name, char *text, size_t size);
bool write_at(int dir, const char *name, const char *text);
bool keyed(const char *text, const char *key, unsigned long long *value);
bool has_word(const char *text, const char *word);
bool event_is_set(int dir, const char *key);
bool wait_event(int dir, const char *key, bool set, int64_t until);
int signal_procs(int dir, int sig);
int freeze(int dir);
void thaw(int dir);
bool kill_all(int dir);

/* cgroup_fork.c */
extern bool use_clone3; /* clone3 with CLONE_INTO_CGROUP, until the kernel or a seccomp filter refuses it */
pid_t fork_into_dir(int dir);

/* cgroup.c */
int make_dir(unsigned *serial);
bool remove_dir(int dir, unsigned serial, int64_t until);

#endif
