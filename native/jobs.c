/*
 * Jobs, one per spawn request: the table of live ones, their commands' exits (seen, then reaped once the job is
 * done), kills, the Exit frame, and their end.
 */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif
#include <unistd.h>

#define HASH_BUCKETS 1024
static struct job *by_id[HASH_BUCKETS];
struct job *live; /* list head */
static struct job *graves;

struct job *find_job(uint32_t id) {
  for (struct job *j = by_id[id % HASH_BUCKETS]; j != NULL; j = j->hash_next) {
    if (j->id == id) return j;
  }
  return NULL;
}

/* Makes a started job findable by its id, and live (for timers and stop()). */
void track_job(struct job *job) {
  job->hash_next = by_id[job->id % HASH_BUCKETS];
  by_id[job->id % HASH_BUCKETS] = job;
  job->next = live;
  if (live) live->prev = job;
  live = job;
}

static void unhash(struct job *job) {
  struct job **slot = &by_id[job->id % HASH_BUCKETS];
  while (*slot != NULL && *slot != job) slot = &(*slot)->hash_next;
  if (*slot == job) *slot = job->hash_next;
}

static void free_stdin_ops(struct job *job) {
  while (job->stdin_head != NULL) {
    struct stdin_op *op = job->stdin_head;
    job->stdin_head = op->next;
    free(op->data);
    free(op);
  }
  job->stdin_tail = NULL;
}

/* Ends a job for good; its memory goes at the end of this loop turn (events for it may still be pending). */
void bury(struct job *job) {
  watch_close(&job->w_stdin);
  for (int fd = 1; fd <= 2; fd++) {
    watch_close(&job->w_out[fd]);
    forget_grown_pipe(job, fd);
  }
  watch_close(&job->w_exit);
  free_stdin_ops(job);
  if (job->prev) job->prev->next = job->next;
  else live = job->next;
  if (job->next) job->next->prev = job->prev;
  job->prev = job->next = NULL;
  job->grave_next = graves;
  graves = job;
}

void free_graves(void) {
  while (graves != NULL) {
    struct job *job = graves;
    graves = job->grave_next;
    for (int fd = 1; fd <= 2; fd++) buf_release(&job->collected[fd]);
    free(job);
  }
}

/* Signals the command, its process group, or (`tree`, and every kill of a killTree command) its whole tree. */
void kill_child(struct job *job, int sig, enum kill_scope scope) {
  if (sig == 0) return;
  if (job->kill_tree || scope == KILL_TREE) {
    tree_signal(job, sig);
    return;
  }
  if (job->exited) return;
  kill(scope == KILL_GROUP ? -job->pid : job->pid, sig); /* ESRCH: it is exiting */
}

/*
 * SIGKILLs the group of a command that may have exited already: its zombie, not reaped before the job is done,
 * keeps the process group id from being reused, so a grandchild still holding the job's streams gets it, and
 * nothing else does.
 */
void kill_group_for_good(struct job *job) {
  if (job->kill_tree) tree_signal(job, SIGKILL);
  else if (!job->reaped) kill(-job->pid, SIGKILL);
}

/* Collects the zombie of a command whose exit was seen (check_exit): its pid may be reused from now on. */
static void reap(struct job *job) {
  if (job->reaped || !job->exited) return;
  job->reaped = true;
  struct rusage usage;
  pid_t r;
  while ((r = wait4(job->pid, NULL, WNOHANG, &usage)) < 0 && errno == EINTR) {}
  if (r == job->pid) {
    job->usage = usage;
    job->has_usage = true;
  }
}

/* Microseconds in a timeval. */
static unsigned long long micros(struct timeval t) {
  return (unsigned long long)t.tv_sec * 1000000ULL + (unsigned long long)t.tv_usec;
}

/* The command's resource usage as JSON members (Bun's resourceUsage() fields, cpu times in µs, maxRSS in bytes). */
static int usage_json(const struct job *job, char *out, size_t size) {
  if (!job->has_usage) return snprintf(out, size, "%s", "");
  const struct rusage *u = &job->usage;
#ifdef __APPLE__
  unsigned long long rss = (unsigned long long)u->ru_maxrss; /* bytes */
#else
  unsigned long long rss = (unsigned long long)u->ru_maxrss * 1024ULL; /* KiB */
#endif
  unsigned long long user = micros(u->ru_utime), system = micros(u->ru_stime);
  if (job->leaf >= 0) {
    /* In a leaf: the whole tree's CPU time (processes left running and children never waited for included), and
     * its memory's peak where the leaf has the memory controller. */
    struct cgroup_usage tree;
    cgroup_leaf_usage(job->leaf, &tree);
    if (tree.user_us > user) user = tree.user_us;
    if (tree.system_us > system) system = tree.system_us;
    if (tree.has_memory_peak && tree.memory_peak > rss) rss = tree.memory_peak;
  }
  return snprintf(out, size,
                  ",\"usage\":{\"user\":%llu,\"system\":%llu,\"maxRSS\":%llu,\"vcsw\":%ld,\"ivcsw\":%ld,"
                  "\"inblock\":%ld,\"oublock\":%ld,\"msgsnd\":%ld,\"msgrcv\":%ld,\"nsignals\":%ld,\"nswap\":%ld,"
                  "\"shm\":%ld}",
                  user, system, rss, u->ru_nvcsw, u->ru_nivcsw, u->ru_inblock,
                  u->ru_oublock, u->ru_msgsnd, u->ru_msgrcv, u->ru_nsignals, u->ru_nswap, u->ru_ixrss);
}

/* The exit payload: u32 JSON length, JSON {code, signal, reason}, u32 stdout length, stdout, stderr. */
static void send_exit(struct job *job, uint8_t type, bool with_output) {
  char json[640];
  char usage[512];
  const char *name = job->sig ? signal_name(job->sig) : NULL;
  char code[16], signal_text[32], reason[16];
  /* A signal without a name on the wire (a real-time one) is reported as a shell does: code 128 + its number. */
  if (name) snprintf(code, sizeof code, "null");
  else snprintf(code, sizeof code, "%d", job->code);
  if (name) snprintf(signal_text, sizeof signal_text, "\"%s\"", name);
  else snprintf(signal_text, sizeof signal_text, "null");
  if (job->reason) snprintf(reason, sizeof reason, "\"%s\"", job->reason);
  else snprintf(reason, sizeof reason, "null");
  usage_json(job, usage, sizeof usage);
  char limit[32] = "";
  if (job->limit_hit) snprintf(limit, sizeof limit, ",\"limit\":\"%s\"", job->limit_hit);
  int json_len = snprintf(json, sizeof json, "{\"code\":%s,\"signal\":%s,\"reason\":%s%s%s}", code, signal_text,
                          reason, usage, limit);
  size_t stdout_len = with_output ? job->collected[1].len : 0;
  size_t stderr_len = with_output ? job->collected[2].len : 0;
  size_t length = 8 + (size_t)json_len + stdout_len + stderr_len;
  uint8_t *p = frame_begin(8 + (size_t)json_len);
  put_u32(p, (uint32_t)json_len);
  memcpy(p + 4, json, (size_t)json_len);
  put_u32(p + 4 + json_len, (uint32_t)stdout_len);
  frame_end_partial(type, job->id, length, 8 + (size_t)json_len);
  /* The output goes out from where it was collected (writev), not copied into the frame. */
  if (stdout_len) send_owned(&job->collected[1]);
  if (stderr_len) send_owned(&job->collected[2]);
}

/* Tells the host the command's pid (Spawned), unless it was told already; before any other frame of the job's. */
void send_spawned(struct job *job) {
  if (job->spawned_at < 0) return;
  job->spawned_at = -1;
  uint8_t pid[4];
  put_u32(pid, (uint32_t)job->pid);
  send_frame(F_SPAWNED, job->id, pid, 4);
}

/* Completes a request once the child exited and its streams ended: Exit, then only stdin may still drain. */
void finish(struct job *job) {
  if (job->done || !job->exited || job->open[1] || job->open[2]) return;
  job->done = true;
  job->timeout_at = job->force_at = job->grace_at = 0;
  send_spawned(job); /* a short command's goes out with its Exit, in the same write */
  reap(job);
  unhash(job);
  send_exit(job, F_EXIT, true);
  if (job->leaf >= 0) {
    /* Whatever the command left in its leaf ends with its request. */
    cgroup_leaf_give_back(job->leaf);
    job->leaf = -1;
  }
  if (job->stdin_head == NULL) bury(job);
}

void stop_for(struct job *job, const char *reason, int sig) {
  if (job->exited || job->reason != NULL) return;
  job->reason = reason;
  kill_child(job, sig, KILL_GROUP);
  job->force_at = deadline_after(job->force_kill_ms);
}

/*
 * Which of its limits ended the command, where the kernel says so: SIGXCPU past cpuSeconds' soft limit, or SIGKILL
 * at its hard one (a second later) with that much CPU used; SIGXFSZ past fileSizeBytes. A command that hits
 * memoryBytes, processes or openFiles sees a failed call (ENOMEM, EAGAIN, EMFILE) and ends as it chooses: nothing
 * names the limit then.
 */
static const char *limit_hit(const struct job *job) {
  if (job->reason != NULL) return NULL; /* the worker ended it */
  if (job->limit_set[LIMIT_CPU]) {
    if (job->sig == SIGXCPU) return "cpu";
    /* The hard limit, a second past the soft one, is checked at the scheduler's tick: 10 ms of slack. */
    unsigned long long used = job->has_usage ? micros(job->usage.ru_utime) + micros(job->usage.ru_stime) : 0;
    if (job->sig == SIGKILL && used + 10000ULL >= (job->limit_value[LIMIT_CPU] + 1) * 1000000ULL) return "cpu";
  }
  if (job->limit_set[LIMIT_FILE_SIZE] && job->sig == SIGXFSZ) return "fileSize";
  if (job->leaf >= 0 && (job->sig != 0 || job->code != 0)) {
    /* A command that failed after its tree hit memory.max (an OOM kill in it) or pids.max (a fork refused). */
    struct cgroup_usage tree;
    cgroup_leaf_usage(job->leaf, &tree);
    if (tree.oom_kills > 0) return "memory";
    if (tree.pids_max_events > 0) return "processes";
  }
  return NULL;
}

/*
 * Sees whether the command exited, without reaping it (WNOWAIT): its zombie stays until the job is done (reap), so
 * the force timer and stop() can still SIGKILL its process group while a grandchild holds the job's streams.
 */
void check_exit(struct job *job) {
  if (job->exited) return;
  siginfo_t info;
  memset(&info, 0, sizeof info);
#ifdef __linux__
  /* The system call itself, which (unlike glibc's wrapper) also gives the zombie's usage, kept unreaped. */
  struct rusage usage;
  int r = (int)syscall(SYS_waitid, P_PID, (id_t)job->pid, &info, WEXITED | WNOHANG | WNOWAIT, &usage);
  if (r == 0 && info.si_pid != 0) {
    job->usage = usage;
    job->has_usage = true;
  }
#else
  int r = waitid(P_PID, (id_t)job->pid, &info, WEXITED | WNOHANG | WNOWAIT);
#endif
  if (r < 0 && errno == EINTR) return;
  if (r == 0 && info.si_pid == 0) return; /* still running */
  watch_close(&job->w_exit);
  job->exited = true;
  if (r < 0) {
    job->code = -1; /* not ours any more (ECHILD): nothing sensible to report, nothing to reap or signal */
    job->reaped = true;
  } else if (info.si_code == CLD_EXITED) {
    job->code = info.si_status;
  } else {
    job->sig = info.si_status;
    job->code = 128 + job->sig;
  }
  job->limit_hit = limit_hit(job);
  tree_after_exit(job);
  job->timeout_at = 0;
  /* A forced SIGKILL still due reaches the group while a stream is open: a grandchild may hold it. */
  if (!job->open[1] && !job->open[2]) job->force_at = 0;
  if (!job->buffered && (job->open[1] || job->open[2])) {
    send_exit(job, F_EXITED, false);
    /* From here its output may run a window further ahead of the host (ahead_allowed): paused streams resume. */
    for (int fd = 1; fd <= 2; fd++) {
      if (job->open[fd]) update_pause(job, fd);
    }
  }
  arm_grace(job);
  finish(job);
}
