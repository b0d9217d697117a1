/*
 * What the files of a command's tree share: tree.c (finding and signalling a tree), proc_children.c (what /proc or
 * libproc says of a process) and subreaper.c (the worker as subreaper). Their API to the rest of the worker is in
 * worker.h.
 */
#ifndef SPAWNPOOL_TREE_H
#define SPAWNPOOL_TREE_H

#include "worker.h"

/* A set of pids, in the order found. */
struct pid_set {
  pid_t *pids;
  size_t count, room;
};

bool pid_set_has(const struct pid_set *set, pid_t pid);
void pid_set_add(struct pid_set *set, pid_t pid);

/* proc_children.c */
/* Parsed /proc/<pid>/stat: the state letter (0: gone), the parent, the process group. */
struct proc_stat {
  char state;
  pid_t ppid, pgrp;
};
struct proc_stat stat_of(pid_t pid);
/* Appends to `out` the children of `pid`. */
void children_of(pid_t pid, struct pid_set *out);

/* tree.c */
/* SIGKILLs `root`, a process the worker may signal by its pid (its own unreaped child), and everything below it. */
void tree_kill_from(pid_t root);

#endif
