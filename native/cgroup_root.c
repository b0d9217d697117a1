/* The root of a worker's cgroup leaves: cgroup_init, which checks it, enables its controllers and tries what this
 * kernel does (see the top of cgroup.c). */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__

#include "cgroup.h"

#include <fcntl.h>
#include <stdarg.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

/* From <linux/magic.h>, which not every C library's headers include: the kernel's ABI, which does not change. */
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif
const char *const CONTROLLERS[CG_COUNT] = {"memory", "pids", "cpu"};
int root_fd = -1;
pid_t worker_pid;
bool leaves_have[CG_COUNT];
bool kill_spoils;

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
 * cgroup holding both the worker's own cgroup and the root). And what this kernel's clone3 does (see the top of
 * cgroup.c): if it kills a child in a fresh leaf (the worker's own cgroup was once written cgroup.kill), clone3 is given
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

#endif
