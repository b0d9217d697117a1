/*
 * A command's whole tree (a request's `killTree`): everything it started, daemons included, found and signalled
 * without touching a process that is not one of its descendants.
 *
 * How the tree stays reachable. A killTree command is made a child subreaper before its exec (PR_SET_CHILD_SUBREAPER
 * survives execve): a descendant whose parent dies is re-parented to the command, not to init, so while the command
 * runs every process it started, double-forked or setsid'd, is below it. Signalling the tree stops it first: each
 * process found is sent SIGSTOP and its children are read only once it is stopped (a stopped parent reaps nothing, so
 * no pid read from its list can be freed and reused before it is signalled); passes repeat until one finds nothing
 * new; then every process gets the signal, and SIGCONT unless the signal was SIGKILL.
 *
 * What the command leaves when it exits on its own. Its children are re-parented at its exit, to the worker while the
 * worker is a subreaper itself. The worker is one only while every command it runs is a killTree one (a plain
 * command's orphans must keep going to init, as they do without spawnpool); so whatever it adopts is what a killTree
 * command left, and is killed, whole tree, on sight (tree_after_exit) and reaped (reap_adopted). While plain commands
 * run beside it, a killTree command's own exit reaches only its process group (its zombie holds the group's id).
 *
 * Linux reads children from /proc/<pid>/task/<tid>/children; macOS from proc_listchildpids (no subreaper there: a
 * tree is reachable while its processes' parents live). Elsewhere a tree is the command's process group.
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
#include <sys/prctl.h>
#endif
#ifdef __APPLE__
#include <libproc.h>
#include <sys/proc.h>
#endif

/* A set of pids, in the order found. */
struct pid_set {
  pid_t *pids;
  size_t count, room;
};

static bool pid_set_has(const struct pid_set *set, pid_t pid) {
  for (size_t i = 0; i < set->count; i++) {
    if (set->pids[i] == pid) return true;
  }
  return false;
}

static void pid_set_add(struct pid_set *set, pid_t pid) {
  if (set->count == set->room) {
    set->room = set->room ? set->room * 2 : 64;
    set->pids = xrealloc(set->pids, set->room * sizeof *set->pids);
  }
  set->pids[set->count++] = pid;
}

#ifdef __linux__
/* Appends to `out` the children of every thread of `pid` (a child belongs to the thread that forked it). */
static void children_of(pid_t pid, struct pid_set *out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
  DIR *tasks = opendir(path);
  if (tasks == NULL) return; /* gone: it has no children left either */
  for (struct dirent *task; (task = readdir(tasks)) != NULL;) {
    if (task->d_name[0] < '0' || task->d_name[0] > '9') continue;
    char file[320];
    snprintf(file, sizeof file, "/proc/%ld/task/%s/children", (long)pid, task->d_name);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char text[4096];
    size_t filled = 0;
    for (;;) {
      ssize_t n = read(fd, text + filled, sizeof text - 1 - filled);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) filled += (size_t)n;
      /* A full buffer is parsed up to its last separator and refilled with the rest. */
      text[filled] = '\0';
      char *last = n > 0 && filled == sizeof text - 1 ? strrchr(text, ' ') : NULL;
      char *end = last != NULL ? last : text + filled;
      for (char *p = text; p < end;) {
        char *next;
        long child = strtol(p, &next, 10);
        if (next == p) break;
        if (child > 0) pid_set_add(out, (pid_t)child);
        p = next;
      }
      if (last == NULL) break;
      filled = (size_t)(text + filled - last);
      memmove(text, last, filled);
    }
    close(fd);
  }
  closedir(tasks);
}

/* The state letter of /proc/<pid>/stat ('T' stopped, 'Z' zombie, ...), or 0 when the process is gone. */
static char state_of(pid_t pid) {
  char path[64], text[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n;
  while ((n = read(fd, text, sizeof text - 1)) < 0 && errno == EINTR) {}
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  const char *paren = strrchr(text, ')'); /* the name may hold anything, ")" included */
  return paren != NULL && paren[1] == ' ' ? paren[2] : 0;
}
#elif defined(__APPLE__)
static void children_of(pid_t pid, struct pid_set *out) {
  pid_t kids[1024];
  int n = proc_listchildpids(pid, kids, (int)sizeof kids);
  for (int i = 0; i < n && i < 1024; i++) {
    if (kids[i] > 0) pid_set_add(out, kids[i]);
  }
}

static char state_of(pid_t pid) {
  struct proc_bsdinfo info;
  if (proc_pidinfo(pid, PROC_PIDTBSDINFO, 0, &info, (int)sizeof info) != (int)sizeof info) return 0;
  return info.pbi_status == SSTOP ? 'T' : info.pbi_status == SZOMB ? 'Z' : 'R';
}
#else
static void children_of(pid_t pid, struct pid_set *out) {
  (void)pid;
  (void)out;
}

static char state_of(pid_t pid) {
  (void)pid;
  return 'T';
}
#endif

/* Whether `pid` is stopped or can do nothing more (a zombie, or gone): its list of children is final. */
static bool settled(pid_t pid) {
  char state = state_of(pid);
  return state == 0 || state == 'T' || state == 't' || state == 'Z' || state == 'X';
}

/* Waits, a bounded while, until `pid` is stopped (a process in uninterruptible sleep stops when it leaves it). */
static void wait_settled(pid_t pid) {
  for (int i = 0; i < 2000 && !settled(pid); i++) {
    struct timespec pause = {0, i < 100 ? 0 : 50 * 1000};
    if (i < 100) sched_yield();
    else nanosleep(&pause, NULL);
  }
}

/*
 * Stops `root` and everything below it, and returns them all, `root` first. `root` is the worker's own child (its
 * pid is held until the worker reaps it), and each pid after it was read from the list of a stopped process in the
 * set, so each is a descendant of `root` when it is stopped.
 */
static struct pid_set stop_tree(pid_t root) {
  struct pid_set tree = {0};
  pid_set_add(&tree, root);
  kill(root, SIGSTOP);
  size_t read_upto = 0; /* members whose children were read in the current pass */
  for (int pass = 0; pass < 64; pass++) {
    size_t before = tree.count;
    for (size_t i = 0; i < tree.count; i++) {
      pid_t member = tree.pids[i];
      wait_settled(member);
      struct pid_set kids = {0};
      children_of(member, &kids);
      for (size_t k = 0; k < kids.count; k++) {
        if (pid_set_has(&tree, kids.pids[k])) continue;
        pid_set_add(&tree, kids.pids[k]);
        kill(kids.pids[k], SIGSTOP);
      }
      free(kids.pids);
    }
    /* A pass that found nothing new over a stopped tree: nothing in it can fork any more. */
    if (tree.count == before && read_upto == tree.count) break;
    read_upto = tree.count;
  }
  return tree;
}

/* Signals a stopped tree, and lets it run again to take the signal (SIGKILL needs no SIGCONT). */
static void signal_stopped(const struct pid_set *tree, int sig) {
  for (size_t i = 0; i < tree->count; i++) kill(tree->pids[i], sig);
  if (sig == SIGKILL || sig == SIGSTOP) return;
  for (size_t i = 0; i < tree->count; i++) kill(tree->pids[i], SIGCONT);
}

/*
 * Sends `sig` to a command's whole tree. Once its exit was seen, its tree is no longer below it (it was re-parented),
 * and only its process group is left to signal: its zombie holds the group's id until the job is done.
 */
void tree_signal(struct job *job, int sig) {
  if (sig == 0) return;
  if (job->leaf >= 0) {
    cgroup_leaf_signal(job->leaf, sig); /* everything the command started is in its leaf, before and after its exit */
    return;
  }
  if (job->reaped) return;
  if (job->exited) {
    if (!job->detached) kill(-job->pid, sig);
    return;
  }
  struct pid_set tree = stop_tree(job->pid);
  signal_stopped(&tree, sig);
  free(tree.pids);
  /* A member that left the group before the walk is in `tree`; the group's members that escaped it are not. */
  if (!job->detached) kill(-job->pid, sig);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* The worker as subreaper: on only while every running command is a killTree one. */

static unsigned plain_running;    /* running commands that are not killTree ones (detached ones included) */
static unsigned tree_running;     /* running killTree commands */
static bool subreaper_on;         /* PR_SET_CHILD_SUBREAPER is set on the worker */
static bool adopted_possible;     /* it was on at some point: adopted children may need reaping */

static void set_subreaper(bool on) {
#ifdef __linux__
  if (on == subreaper_on) return;
  if (prctl(PR_SET_CHILD_SUBREAPER, on ? 1UL : 0UL, 0UL, 0UL, 0UL) != 0) return;
  subreaper_on = on;
  if (on) adopted_possible = true;
#else
  (void)on;
#endif
}

static bool plain(const struct job *job) {
  return !job->kill_tree || job->detached;
}

/* Whether the command runs in a cgroup leaf, which holds its tree: the worker never needs to adopt its orphans. */
static bool contained(const struct job *job) {
  return cgroup_enabled() && !job->detached;
}

/* Before a command starts: a plain command's orphans must not come to the worker, so it stops being a subreaper. */
void tree_before_spawn(const struct job *job) {
  if (contained(job)) return;
  if (plain(job)) {
    plain_running++;
    set_subreaper(false);
  } else {
    tree_running++;
    if (plain_running == 0) set_subreaper(true);
  }
}

void tree_spawn_failed(const struct job *job) {
  if (contained(job)) return;
  if (plain(job)) plain_running--;
  else tree_running--;
  if (plain_running == 0 && tree_running > 0) set_subreaper(true);
}

/* Whether `pid` is a command's (whose zombie the worker keeps until its job is done). */
static bool is_command(pid_t pid) {
  for (struct job *job = live; job != NULL; job = job->next) {
    if (job->pid == pid && !job->reaped) return true;
  }
  return false;
}

/* Every child of the worker that is not a command's: what a killTree command left when it exited. */
static struct pid_set adopted(void) {
  struct pid_set kids = {0}, out = {0};
  children_of(getpid(), &kids);
  for (size_t i = 0; i < kids.count; i++) {
    if (!is_command(kids.pids[i])) pid_set_add(&out, kids.pids[i]);
  }
  free(kids.pids);
  return out;
}

/*
 * After a command's exit was seen: the counts, and whether the worker is a subreaper from now on. What a killTree
 * command left in its process group is killed; and while the worker is a subreaper, what it adopted (the command's
 * children, re-parented at its exit before that exit could be seen) is killed with its whole tree.
 */
void tree_after_exit(const struct job *job) {
  if (contained(job)) {
    if (job->kill_tree && job->leaf >= 0) cgroup_leaf_kill(job->leaf);
    return;
  }
  if (plain(job)) plain_running--;
  else tree_running--;
  if (!plain(job)) {
    if (!job->reaped) kill(-job->pid, SIGKILL);
    if (subreaper_on) {
      struct pid_set orphans = adopted();
      for (size_t i = 0; i < orphans.count; i++) {
        struct pid_set tree = stop_tree(orphans.pids[i]);
        signal_stopped(&tree, SIGKILL);
        free(tree.pids);
      }
      free(orphans.pids);
    }
  }
  if (plain_running == 0 && tree_running > 0) set_subreaper(true);
}

/* On SIGCHLD: reaps the adopted children that exited (commands' zombies stay until their jobs are done). */
void reap_adopted(void) {
  if (!adopted_possible) return;
  struct pid_set orphans = adopted();
  for (size_t i = 0; i < orphans.count; i++) {
    while (waitpid(orphans.pids[i], NULL, WNOHANG) < 0 && errno == EINTR) {}
  }
  free(orphans.pids);
}
