/*
 * A command's whole tree (a request's `killTree`, a `*SIGNAL` kill): everything it started, daemons included, found
 * and signalled without touching a process that is not one of its descendants.
 *
 * How the tree stays reachable. A killTree command is made a child subreaper before its exec (PR_SET_CHILD_SUBREAPER
 * survives execve): a descendant whose parent dies is re-parented to the command, not to init, so while the command
 * runs every process it started, double-forked or setsid'd, is below it.
 *
 * How it is signalled. The command's process group is stopped first (SIGSTOP; its zombie-or-live leader holds the
 * group's id), then the tree is walked from the command through /proc/<pid>/task/<tid>/children, each process found
 * stopped as it is found, in passes until one finds nothing new and every process has stopped (one deadline for the
 * whole walk: a process that never stops, in uninterruptible sleep, does not hold the loop). Then the signal goes once
 * to each process: to the group with one kill, and one by one to those outside it; then SIGCONT, unless the signal was
 * SIGKILL or a stop signal. Where pidfds exist (Linux 5.3) each process is held by one from the moment it is found,
 * and is a member only if, after that, /proc shows it a child of a member still alive: a pid read from a list and
 * reused before it was opened is never taken for a descendant, and a signal through a pidfd never reaches a process
 * that reused the pid of one that exited. Without pidfds (macOS, Linux before 5.3) a process is checked the same way
 * and signalled by its pid, which leaves a window of microseconds in which a pid freed and reused could be reached.
 *
 * What the command leaves when it exits on its own. Its children are re-parented at its exit, to the worker while the
 * worker is a subreaper itself. The worker is one only while every command it runs is a killTree one (a plain
 * command's orphans must keep going to init, as they do without spawnpool); so a child it adopts is what a killTree
 * command left (or a process a killTree command made with CLONE_PARENT), and is killed, whole tree, on sight
 * (tree_after_exit) and reaped (reap_adopted). Children the worker had before it became a subreaper (made with
 * CLONE_PARENT by a plain command) are left alone. While plain commands run beside it, a killTree command's own exit
 * reaches only its process group.
 *
 * Linux reads children from /proc/<pid>/task/<tid>/children (or, without CONFIG_PROC_CHILDREN, from every process's
 * parent in /proc); macOS from proc_listchildpids (no subreaper there: a tree is reachable while its processes'
 * parents live). Elsewhere a tree is the command's process group.
 *
 * The files: tree.c the walk and the signal, proc_children.c what /proc or libproc says of a process, subreaper.c the
 * worker as subreaper, tree.h what they share.
 */
#include "worker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <poll.h>
#include <sys/prctl.h>
#endif
#ifdef __APPLE__
#include <libproc.h>
#include <sys/proc.h>
#endif

#include "tree.h"

#if defined(__linux__) && defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
#define HAVE_PIDFD 1
#else
#define HAVE_PIDFD 0
#endif

/* The longest a walk waits for its processes to stop, in all. */
#define WALK_DEADLINE_US (50 * 1000)

/* ---------------------------------------------------------------------------------------------------------- */
/* A tree: its processes, each held by a pidfd where there are pidfds. */

struct member {
  pid_t pid;
  int fd;    /* its pidfd, or -1 */
  bool done; /* its children were read once it had stopped (or exited): its list is final */
};

struct tree {
  struct member *members;
  size_t count, room;
};

static bool in_tree(const struct tree *tree, pid_t pid) {
  for (size_t i = 0; i < tree->count; i++) {
    if (tree->members[i].pid == pid) return true;
  }
  return false;
}

/* Whether a member is still alive (its pidfd is not readable); without a pidfd, whether its pid is in use. */
static bool still_alive(const struct member *m) {
#if HAVE_PIDFD
  if (m->fd >= 0) {
    struct pollfd p = {m->fd, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }
#endif
  char state = stat_of(m->pid).state;
  return state != 0 && state != 'Z' && state != 'X';
}

static int signal_member(const struct member *m, int sig) {
#if HAVE_PIDFD
  if (m->fd >= 0) return (int)syscall(SYS_pidfd_send_signal, m->fd, sig, NULL, 0);
#endif
  return kill(m->pid, sig);
}

/*
 * Adds `pid`, read from the children of `parent` (a live member), if it is `parent`'s child: opened first, then seen
 * in /proc with `parent` as its parent while both are alive (so the /proc entry read was its own, and `parent`'s pid
 * was not reused). Stopped at once.
 */
static void add_child(struct tree *tree, const struct member *parent, pid_t pid) {
  struct member m = {pid, -1, false};
#if HAVE_PIDFD
  m.fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (m.fd < 0 && errno == ESRCH) return; /* gone already */
#endif
  bool child = stat_of(pid).ppid == parent->pid && still_alive(&m) && still_alive(parent);
  if (!child) {
    if (m.fd >= 0) close(m.fd);
    return;
  }
  if (tree->count == tree->room) {
    tree->room = tree->room ? tree->room * 2 : 64;
    tree->members = xrealloc(tree->members, tree->room * sizeof *tree->members);
  }
  tree->members[tree->count++] = m;
  signal_member(&m, SIGSTOP);
}

/* Whether a member is stopped or has exited: its list of children can no longer change by its own doing. */
static bool settled(const struct member *m) {
  char state = stat_of(m->pid).state;
  return state == 0 || state == 'T' || state == 't' || state == 'Z' || state == 'X' || !still_alive(m);
}

/*
 * Stops `root` (the worker's own unreaped child: its pid is safe) and everything below it; `group`, when not 0, is
 * stopped first as a whole (its id is held by `root` or its zombie). Each member's children are read as it is found
 * (what they are is stopped sooner), and again once it has stopped, which makes its list final; passes go on until
 * every member's list is final, or the walk's deadline passes.
 */
static struct tree stop_tree(pid_t root, pid_t group) {
  struct tree tree = {0};
  if (group != 0) kill(-group, SIGSTOP);
  struct member first = {root, -1, false};
#if HAVE_PIDFD
  first.fd = (int)syscall(SYS_pidfd_open, root, 0);
#endif
  tree.members = xrealloc(NULL, 64 * sizeof *tree.members);
  tree.room = 64;
  tree.members[tree.count++] = first;
  signal_member(&first, SIGSTOP);
  int64_t deadline = now_us() + WALK_DEADLINE_US;
  for (;;) {
    bool late = now_us() >= deadline, all_done = true, progress = false;
    for (size_t i = 0; i < tree.count; i++) {
      if (tree.members[i].done) continue;
      struct member parent = tree.members[i];
      bool final = settled(&parent) || late; /* read before its children: a list read after it is final */
      if (still_alive(&parent)) {
        struct pid_set kids = {0};
        children_of(parent.pid, &kids);
        for (size_t k = 0; k < kids.count; k++) {
          if (!in_tree(&tree, kids.pids[k])) {
            add_child(&tree, &parent, kids.pids[k]);
            progress = true;
          }
        }
        free(kids.pids);
      }
      if (final) {
        tree.members[i].done = true;
        progress = true;
      } else {
        all_done = false;
      }
    }
    if (all_done || late) break;
    if (!progress) sched_yield(); /* stops still landing */
  }
  return tree;
}

static bool stops(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/*
 * Sends `sig` once to each process of a stopped tree: to `group` (not 0) with one kill, and one by one to the members
 * outside it; then lets them run to take it, unless it kills or stops them. Closes the tree's pidfds.
 */
static void signal_tree(struct tree *tree, pid_t group, int sig) {
  bool *alone = xrealloc(NULL, (tree->count ? tree->count : 1) * sizeof *alone);
  for (size_t i = 0; i < tree->count; i++) {
    alone[i] = group == 0 || stat_of(tree->members[i].pid).pgrp != group || !still_alive(&tree->members[i]);
  }
  for (size_t i = 0; i < tree->count; i++) {
    if (alone[i]) signal_member(&tree->members[i], sig);
  }
  if (group != 0) kill(-group, sig);
  if (sig != SIGKILL && !stops(sig)) {
    for (size_t i = 0; i < tree->count; i++) {
      if (alone[i]) signal_member(&tree->members[i], SIGCONT);
    }
    if (group != 0) kill(-group, SIGCONT);
  }
  for (size_t i = 0; i < tree->count; i++) {
    if (tree->members[i].fd >= 0) close(tree->members[i].fd);
  }
  free(alone);
  free(tree->members);
  tree->members = NULL;
  tree->count = tree->room = 0;
}

/*
 * Sends `sig` to a command's whole tree: its cgroup leaf where it has one; else the tree below it while it runs (or
 * its zombie is not yet seen); once its exit was seen its tree is no longer below it (it was re-parented), and only its
 * process group is left, its id held by the zombie until the job is done.
 */
void tree_signal(struct job *job, int sig) {
  if (sig == 0) return;
  if (job->leaf >= 0) {
    cgroup_leaf_signal(job->leaf, sig); /* everything the command started is in its leaf, before and after its exit */
    return;
  }
  if (job->reaped) return;
  if (job->exited) {
    kill(-job->pid, sig);
    return;
  }
  /* The command leads its process group (detached: its session and group). */
  struct tree tree = stop_tree(job->pid, job->pid);
  signal_tree(&tree, job->pid, sig);
}

void tree_kill_from(pid_t root) {
  struct tree tree = stop_tree(root, 0);
  signal_tree(&tree, 0, SIGKILL);
}
