/* The worker as subreaper (PR_SET_CHILD_SUBREAPER), on only while every running command is a killTree one, and what
 * it does with the orphans it adopts: see the top of tree.c. */
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

/* ---------------------------------------------------------------------------------------------------------- */
/* The worker as subreaper: on only while every running command is a killTree one. */

static unsigned plain_running;   /* running commands that are not killTree ones (detached ones included) */
static unsigned tree_running;    /* running killTree commands */
static bool subreaper_on;        /* PR_SET_CHILD_SUBREAPER is set on the worker */
static bool adopted_possible;    /* it was on at some point: adopted children may need reaping */
static struct pid_set foreign;   /* the worker's children, not commands', from before it was last turned on */

static bool is_command(pid_t pid) {
  for (struct job *job = live; job != NULL; job = job->next) {
    if (job->pid == pid && !job->reaped) return true;
  }
  return false;
}

/* The worker's children that are not commands' (what it adopted, or what a command made with CLONE_PARENT). */
static struct pid_set not_commands(void) {
  struct pid_set kids = {0}, out = {0};
  children_of(getpid(), &kids);
  for (size_t i = 0; i < kids.count; i++) {
    if (!is_command(kids.pids[i])) pid_set_add(&out, kids.pids[i]);
  }
  free(kids.pids);
  return out;
}

static void set_subreaper(bool on) {
#ifdef __linux__
  if (on == subreaper_on) return;
  if (on) {
    /* What is the worker's already came from plain commands (CLONE_PARENT): never taken for a killTree leftover. */
    struct pid_set now = not_commands();
    for (size_t i = 0; i < now.count; i++) {
      if (!pid_set_has(&foreign, now.pids[i])) pid_set_add(&foreign, now.pids[i]);
    }
    free(now.pids);
  }
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
      struct pid_set orphans = not_commands();
      for (size_t i = 0; i < orphans.count; i++) {
        if (pid_set_has(&foreign, orphans.pids[i])) continue;
        /* The worker's own unreaped child: its pid is safe; what is below it is found as below a command. */
        tree_kill_from(orphans.pids[i]);
      }
      free(orphans.pids);
    }
  }
  if (plain_running == 0 && tree_running > 0) set_subreaper(true);
}

/* On SIGCHLD: reaps the adopted children that exited (commands' zombies stay until their jobs are done). */
void reap_adopted(void) {
  if (!adopted_possible) return;
  struct pid_set orphans = not_commands();
  for (size_t i = 0; i < orphans.count; i++) {
    pid_t r;
    while ((r = waitpid(orphans.pids[i], NULL, WNOHANG)) < 0 && errno == EINTR) {}
    if (r != orphans.pids[i]) continue;
    /* Reaped by the worker, which alone could: its pid leaves `foreign` before anything can reuse it. */
    for (size_t k = 0; k < foreign.count; k++) {
      if (foreign.pids[k] == orphans.pids[i]) foreign.pids[k] = foreign.pids[--foreign.count];
    }
  }
  free(orphans.pids);
}
