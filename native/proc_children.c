/* What /proc (or libproc) says of a process: its state, parent and group, and its children (tree.h); and the pid sets
 * they are collected in. */
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

bool pid_set_has(const struct pid_set *set, pid_t pid) {
  for (size_t i = 0; i < set->count; i++) {
    if (set->pids[i] == pid) return true;
  }
  return false;
}

void pid_set_add(struct pid_set *set, pid_t pid) {
  if (set->count == set->room) {
    set->room = set->room ? set->room * 2 : 64;
    set->pids = xrealloc(set->pids, set->room * sizeof *set->pids);
  }
  set->pids[set->count++] = pid;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* What /proc (or libproc) says of a process. */

#ifdef __linux__
struct proc_stat stat_of(pid_t pid) {
  struct proc_stat st = {0, 0, 0};
  char path[64], text[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return st;
  ssize_t n;
  while ((n = read(fd, text, sizeof text - 1)) < 0 && errno == EINTR) {}
  close(fd);
  if (n <= 0) return st;
  text[n] = '\0';
  const char *paren = strrchr(text, ')'); /* the name may hold anything, ")" included */
  long ppid, pgrp;
  char state;
  if (paren == NULL || sscanf(paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) return st;
  st.state = state;
  st.ppid = (pid_t)ppid;
  st.pgrp = (pid_t)pgrp;
  return st;
}

/* Whether /proc/<pid>/task/<tid>/children exists (CONFIG_PROC_CHILDREN): -1 not known yet. */
static int children_files = -1;

/* Appends to `out` every process whose parent is `pid`, from each process's stat: without CONFIG_PROC_CHILDREN. */
static void children_by_scan(pid_t pid, struct pid_set *out) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) return;
  for (struct dirent *entry; (entry = readdir(proc)) != NULL;) {
    char *end;
    long other = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || other <= 0) continue;
    if (stat_of((pid_t)other).ppid == pid) pid_set_add(out, (pid_t)other);
  }
  closedir(proc);
}

/* Appends to `out` the children of every thread of `pid` (a child belongs to the thread that forked it). */
void children_of(pid_t pid, struct pid_set *out) {
  if (children_files < 0) {
    char self[64];
    snprintf(self, sizeof self, "/proc/%ld/task/%ld/children", (long)getpid(), (long)getpid());
    children_files = access(self, R_OK) == 0;
  }
  if (!children_files) {
    children_by_scan(pid, out);
    return;
  }
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
#elif defined(__APPLE__)
struct proc_stat stat_of(pid_t pid) {
  struct proc_stat st = {0, 0, 0};
  struct proc_bsdinfo info;
  if (proc_pidinfo(pid, PROC_PIDTBSDINFO, 0, &info, (int)sizeof info) != (int)sizeof info) return st;
  st.state = info.pbi_status == SSTOP ? 'T' : info.pbi_status == SZOMB ? 'Z' : 'R';
  st.ppid = (pid_t)info.pbi_ppid;
  st.pgrp = (pid_t)info.pbi_pgid;
  return st;
}

void children_of(pid_t pid, struct pid_set *out) {
  pid_t kids[1024];
  int n = proc_listchildpids(pid, kids, (int)sizeof kids);
  for (int i = 0; i < n && i < 1024; i++) {
    if (kids[i] > 0) pid_set_add(out, kids[i]);
  }
}
#else
struct proc_stat stat_of(pid_t pid) {
  (void)pid;
  struct proc_stat st = {'T', 0, 0};
  return st;
}

void children_of(pid_t pid, struct pid_set *out) {
  (void)pid;
  (void)out;
}
#endif
