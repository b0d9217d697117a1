/* The cgroup API (worker.h) on systems other than Linux: cgroup_init fails with "cgroups are Linux-only". */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifndef __linux__

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
