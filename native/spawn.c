/* Spawning: a validated request's command started with vfork + execve on Linux, posix_spawn elsewhere where it can. */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"

/*
 * A pipe for one stdio slot, or a socketpair where the request asks for the kind Node's child_process and Bun.spawn
 * give: a writer whose reader closed with data unread gets ECONNRESET there, not SIGPIPE. Both ends close on exec;
 * each is used one way only, as a pipe's.
 */
static int make_pipe(int fds[2], bool sockets) {
  if (!sockets) return pipe2(fds, O_CLOEXEC);
#ifdef SOCK_CLOEXEC
  return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds);
#else
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return -1;
  if (fcntl(fds[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(fds[1], F_SETFD, FD_CLOEXEC) != 0) {
    int saved = errno;
    close(fds[0]);
    close(fds[1]);
    errno = saved;
    return -1;
  }
  return 0;
#endif
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
#define HAVE_ADDCHDIR 1
#else
#define HAVE_ADDCHDIR 0
#endif

extern char **environ;

/* The request's names of the limits (core/limits.ts), in the order of the LIMIT_ constants. */
const char *const LIMIT_NAMES[LIMIT_COUNT] = {"cpuSeconds", "memoryBytes", "processes", "openFiles", "fileSizeBytes", "coreBytes"};
/* Their setrlimit resources. */
static const int LIMIT_RESOURCES[LIMIT_COUNT] = {RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_CORE};

static bool mode_is(const struct json_doc *doc, const char *name, const char *mode) {
  return strcmp(json_str(doc, json_get(doc, &doc->nodes[0], name)), mode) == 0;
}

struct child_plan {
  const char *path;
  char **argv;
  char **envp;
  const char *cwd;
  int stdio_fd[3];    /* dup2'd to 0, 1, 2; -1: open /dev/null; -2: inherit */
  int tty;            /* the command's side of its terminal (made its controlling terminal), or -1 */
  bool detached;
  bool set_uid, set_gid;
  uid_t uid;
  gid_t gid;
  bool subreaper;              /* the command adopts its descendants' orphans (tree.c) */
  int leaf;                    /* the cgroup leaf it starts in (cgroup.c), or -1 */
  int limit_count;
  int limit_resource[LIMIT_COUNT];
  struct rlimit limit[LIMIT_COUNT];
};

/* The rlimits a job asks for: soft and hard alike, but for CPU time, whose hard limit (SIGKILL) comes a second after
 * the soft one (SIGXCPU), as a program that handles SIGXCPU gets to stop in time. */
static void plan_limits(struct child_plan *plan, const struct job *job) {
  for (int i = 0; i < LIMIT_COUNT; i++) {
    if (!job->limit_set[i]) continue;
    rlim_t value = (rlim_t)job->limit_value[i];
    if (job->limit_value[i] >= (unsigned long long)RLIM_INFINITY) value = RLIM_INFINITY - 1;
    int k = plan->limit_count++;
    plan->limit_resource[k] = LIMIT_RESOURCES[i];
    plan->limit[k].rlim_cur = value;
    plan->limit[k].rlim_max = i == LIMIT_CPU && value < RLIM_INFINITY - 1 ? value + 1 : value;
  }
}

#if defined(__linux__) && !defined(__sparc__) && !defined(__alpha__)
/*
 * Sets the signals the C library keeps for itself (glibc 32-33, musl 32-34; their sigaction refuses them) back to
 * default with the system call: a parent can leave them ignored (a Deno host's spawn does, through glibc's
 * posix_spawn), and the commands would start so. An all-zero kernel sigaction, in any architecture's layout, is
 * SIG_DFL with no flags and an empty mask; the last argument is the size of the kernel's sigset_t, (_NSIG - 1) / 8
 * bytes with the C libraries' _NSIG (8 on most architectures, 16 on MIPS). (SPARC and Alpha pass more arguments.)
 */
static void reset_libc_signals(void) {
  unsigned long zero[16] = {0};
  for (int sig = 32; sig <= 34; sig++) syscall(SYS_rt_sigaction, sig, zero, NULL, (size_t)((_NSIG - 1) / 8));
}
#else
static void reset_libc_signals(void) {}
#endif

/*
 * Whether vfork shares the worker's memory with its child, as it does on Linux and macOS, or copies it, as under
 * qemu-user and valgrind, which run vfork as fork: unknown until a child shows it. Until then, and for good if it
 * copies, the child also writes the errno of a failed start to a close-on-exec pipe the worker reads until the exec
 * closes it; otherwise a bad cwd, a refused uid or a script without "#!" would look like a command that exited 127.
 */
static enum { VFORK_UNKNOWN, VFORK_SHARES, VFORK_COPIES } vfork_memory = VFORK_UNKNOWN;

#ifdef SPAWNPOOL_TEST_FALLBACKS
/* The tests' stand-in for qemu-user and valgrind (the poll build: support/build_native.mjs). */
#define vfork fork
#endif

/* What the vfork child tells the worker: through shared memory where vfork shares it, else through `pipe_fd`. */
struct vfork_report {
  int ran;     /* set first thing by the child: seen by the worker only if the memory is shared */
  int failed;  /* the errno of a failed start */
  int pipe_fd; /* the pipe's write end, or -1 */
};

/*
 * The vfork child: it shares the worker's memory until its exec, so it only makes system calls, and records a failure
 * in `report` before it exits. Not inlined: its frame lies below vfork_exec's, so it cannot reuse a stack slot the
 * worker still needs once the vfork returns. The worker's signals are blocked (but the C library's own) until only
 * default dispositions are left: the ones this worker changed (changed_signals) are set back, and the C library's own;
 * all the others already are default, as no handler outlives an exec.
 */
__attribute__((noinline)) _Noreturn static void exec_child(const struct child_plan *plan,
                                                           volatile struct vfork_report *report) {
  report->ran = 1;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sigismember(&changed_signals, sig) == 1) sigaction(sig, &dfl, NULL);
  }
  reset_libc_signals();
  if (plan->tty >= 0) {
    /* A session of its own, whose controlling terminal is the command's terminal. */
    if (setsid() < 0 || ioctl(plan->tty, TIOCSCTTY, 0) < 0) goto fail;
  } else if (plan->detached ? setsid() < 0 : setpgid(0, 0) < 0) {
    goto fail;
  }
  int null_fd = -1;
  for (int fd = 0; fd < 3; fd++) {
    int from = plan->stdio_fd[fd];
    if (from == -2) continue;
    if (from == -1) {
      if (null_fd < 0) {
        /*
         * The slot is closed first, as posix_spawn's addopen does, so that a full fd table (the worker's pidfds) still
         * has room: /dev/null lands in the slot (the ones below it are set, the worker's own 0-2 above it), where its
         * close-on-exec is cleared; a later "null" slot gets a copy.
         */
        close(fd);
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0) goto fail;
      }
      from = null_fd;
    }
    if (from == fd ? fcntl(fd, F_SETFD, 0) < 0 : dup2(from, fd) < 0) goto fail;
  }
  if (plan->cwd != NULL && chdir(plan->cwd) < 0) goto fail;
  if (plan->set_gid || plan->set_uid) (void)setgroups(0, NULL);
  if (plan->set_gid && setgid(plan->gid) < 0) goto fail;
  if (plan->set_uid && setuid(plan->uid) < 0) goto fail;
  for (int i = 0; i < plan->limit_count; i++) {
    if (setrlimit(plan->limit_resource[i], &plan->limit[i]) < 0) goto fail;
  }
#ifdef __linux__
  if (plan->subreaper && prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) < 0) goto fail;
#endif
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(plan->path, plan->argv, plan->envp);
fail:;
  int failed = errno ? errno : EINVAL;
  report->failed = failed;
  if (report->pipe_fd >= 0 && write(report->pipe_fd, &failed, sizeof failed) < 0) {
    /* nothing left to tell it by */
  }
  _exit(127);
}

/*
 * vfork + execve: every command on Linux, and elsewhere what posix_spawn cannot express (uid, gid; a cwd without
 * addchdir_np). That is a few sigaction calls in the child (exec_child) where glibc's posix_spawn makes one or two for
 * each of the 64 signals, while the worker waits for the exec.
 */
static pid_t vfork_exec(const struct child_plan *plan, int *err) {
  int report_pipe[2] = {-1, -1};
  /* A child started in a cgroup leaf is forked (cgroup_fork_into): it can only report through the pipe. */
  bool forked = plan->leaf >= 0;
  /* Without a pipe (EMFILE), a first child still shows whether memory is shared. */
  if ((forked || vfork_memory != VFORK_SHARES) && pipe2(report_pipe, O_CLOEXEC) != 0) {
    if (forked) {
      *err = errno;
      return -1;
    }
    report_pipe[0] = report_pipe[1] = -1;
  }
  volatile struct vfork_report report = {.ran = 0, .failed = 0, .pipe_fd = report_pipe[1]};
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old); /* no handler of the worker's may run in the child */
  pid_t pid = forked ? cgroup_fork_into(plan->leaf) : vfork();
  if (pid == 0) exec_child(plan, &report);
  int saved = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (report_pipe[1] >= 0) close(report_pipe[1]);
  int failed = report.failed;
  if (report_pipe[0] >= 0) {
    /* End of file once the exec closed the child's end (at once where memory is shared: the exec came first). */
    int reported;
    ssize_t n;
    while ((n = read(report_pipe[0], &reported, sizeof reported)) < 0 && errno == EINTR) {}
    if (n == (ssize_t)sizeof reported) failed = reported; /* only a child writes it */
    close(report_pipe[0]);
  }
  if (pid < 0) {
    *err = saved;
    return -1;
  }
  if (vfork_memory == VFORK_UNKNOWN && !forked) vfork_memory = report.ran ? VFORK_SHARES : VFORK_COPIES;
  if (failed) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    *err = failed;
    return -1;
  }
  return pid;
}

#ifdef __linux__
static pid_t start_child(const struct child_plan *plan, int *err) {
  return vfork_exec(plan, err);
}
#else
static pid_t posix_spawn_plan(const struct child_plan *plan, int *err) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (plan->detached) {
#ifdef POSIX_SPAWN_SETSID
    flags |= POSIX_SPAWN_SETSID;
#endif
  } else {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &changed_signals);
  for (int fd = 0; fd < 3; fd++) {
    if (plan->stdio_fd[fd] == -1) posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0);
    else if (plan->stdio_fd[fd] >= 0) posix_spawn_file_actions_adddup2(&actions, plan->stdio_fd[fd], fd);
  }
#if HAVE_ADDCHDIR
  if (plan->cwd != NULL) posix_spawn_file_actions_addchdir_np(&actions, plan->cwd);
#endif
  pid_t pid;
  int r = posix_spawn(&pid, plan->path, &actions, &attr, plan->argv, plan->envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (r != 0) {
    *err = r;
    return -1;
  }
  return pid;
}

/* posix_spawn where it can express the plan, vfork_exec where it cannot. */
static pid_t start_child(const struct child_plan *plan, int *err) {
  bool needs_vfork = plan->set_uid || plan->set_gid || plan->limit_count > 0 || plan->leaf >= 0 || plan->tty >= 0 ||
                     (!HAVE_ADDCHDIR && plan->cwd != NULL);
#ifndef POSIX_SPAWN_SETSID
  needs_vfork = needs_vfork || plan->detached;
#endif
  return needs_vfork ? vfork_exec(plan, err) : posix_spawn_plan(plan, err);
}
#endif

/* The most of a program's name a SpawnError's message quotes (a name can take most of a 64 MiB frame). */
#define MESSAGE_CMD_BYTES 4096

/* `message` (NULL: "spawn <cmd> <code>") goes out as is; it must need no JSON escaping. */
void send_spawn_error(uint32_t id, const char *cmd, int err, const char *code, const char *message) {
  if (code == NULL) code = errno_name(err);
  struct buf b = {0};
  char head[128];
  int n = snprintf(head, sizeof head, "{\"code\":\"%s\",\"errno\":%d,\"message\":\"", code, -err);
  buf_put(&b, head, (size_t)n);
  if (message != NULL) {
    buf_put(&b, message, strlen(message));
    buf_put(&b, "\"}", 2);
    send_frame(F_SPAWN_ERROR, id, b.data, b.len);
    buf_free(&b);
    return;
  }
  buf_put(&b, "spawn ", 6);
  /*
   * The command in the message, JSON-escaped (it is valid UTF-8: it came out of the JSON parser), and cut to its
   * first MESSAGE_CMD_BYTES at a character's start: a name of control characters cannot grow past a frame.
   */
  size_t len = strlen(cmd);
  if (len > MESSAGE_CMD_BYTES) {
    len = MESSAGE_CMD_BYTES;
    while (len > 0 && ((unsigned char)cmd[len] & 0xc0) == 0x80) len--;
  }
  for (const char *c = cmd; c < cmd + len; c++) {
    unsigned char ch = (unsigned char)*c;
    const char *esc = NULL;
    char unicode[8];
    switch (ch) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\b': esc = "\\b"; break;
    case '\t': esc = "\\t"; break;
    case '\n': esc = "\\n"; break;
    case '\f': esc = "\\f"; break;
    case '\r': esc = "\\r"; break;
    default:
      if (ch < 0x20) {
        snprintf(unicode, sizeof unicode, "\\u%04x", ch);
        esc = unicode;
      }
    }
    if (esc != NULL) buf_put(&b, esc, strlen(esc));
    else buf_put(&b, c, 1);
  }
  n = snprintf(head, sizeof head, " %s\"}", code);
  buf_put(&b, head, (size_t)n);
  send_frame(F_SPAWN_ERROR, id, b.data, b.len);
  buf_free(&b);
}

/* Starts a validated request's command; on failure the host hears SpawnError and the job is freed. */
void start_job(struct job *job, const struct json_doc *doc) {
  const struct json_node *root = &doc->nodes[0];
  const struct json_node *cmd = json_get(doc, root, "cmd");
  const struct json_node *args = json_get(doc, root, "args");
  const struct json_node *cwd = json_get(doc, root, "cwd");
  const struct json_node *env = json_get(doc, root, "env");
  const struct json_node *argv0 = json_get(doc, root, "argv0");
  const struct json_node *clear = json_get(doc, root, "clearEnv");
  const struct json_node *uid = json_get(doc, root, "uid");
  const struct json_node *gid = json_get(doc, root, "gid");
  int err = 0;
  const char *code = NULL;
  char *path = NULL;
  size_t argc = 0, envc = 0;
  for (const struct json_node *a = json_first(doc, args); a; a = json_next(doc, a)) argc++;
  if (env) {
    for (const struct json_node *e = json_first(doc, env); e; e = json_next(doc, e)) envc++;
  }
  bool cleared = clear != NULL && json_truthy(clear);
  size_t inherited = 0;
  if (!cleared) {
    while (environ[inherited] != NULL) inherited++;
  }
  char **argv = xrealloc(NULL, (argc + 2) * sizeof *argv);
  struct env_builder envb;
  env_init(&envb, inherited + envc);
  char **owned = xrealloc(NULL, (envc + 1) * sizeof *owned);
  size_t owned_count = 0;
  int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  int tty[2] = {-1, -1};
  struct child_plan plan = {0};
  plan.tty = -1;

  /* Strings with a NUL inside cannot reach execve: the command fails as Node's spawn does (EINVAL). */
  bool nul = cmd->has_nul || (cwd && cwd->has_nul) || (argv0 && argv0->has_nul);
  size_t i = 0;
  argv[i++] = (char *)json_str(doc, argv0 ? argv0 : cmd);
  for (const struct json_node *a = json_first(doc, args); a; a = json_next(doc, a)) {
    nul = nul || a->has_nul;
    argv[i++] = (char *)json_str(doc, a);
  }
  argv[i] = NULL;
  for (size_t k = 0; k < inherited; k++) {
    const char *eq = strchr(environ[k], '=');
    /* Of an inherited name set twice, the first counts (getenv's). */
    env_put(&envb, environ[k], eq ? (size_t)(eq - environ[k]) : strlen(environ[k]), false);
  }
  if (env) {
    for (const struct json_node *e = json_first(doc, env); e; e = json_next(doc, e)) {
      nul = nul || e->has_nul || e->key_has_nul;
      const char *key = json_key(doc, e);
      size_t key_len = e->key_len;
      char *entry = xrealloc(NULL, key_len + e->str_len + 2);
      memcpy(entry, key, key_len);
      entry[key_len] = '=';
      memcpy(entry + key_len + 1, json_str(doc, e), e->str_len + 1);
      owned[owned_count++] = entry;
      env_put(&envb, entry, key_len, true);
    }
  }
  envb.entries[envb.count] = NULL;
  char **envp = envb.entries;
  if (nul) {
    err = EINVAL;
    goto failed;
  }
  if (uid && (uid->number < 0 || uid->number > (double)UINT32_MAX - 1)) err = EINVAL;
  if (gid && (gid->number < 0 || gid->number > (double)UINT32_MAX - 1)) err = EINVAL;
  if (err) goto failed;
  path = resolve_program(json_str(doc, cmd), envp, cwd ? json_str(doc, cwd) : NULL, &err);
  if (path == NULL) goto failed;

  const char *names[3] = {"stdin", "stdout", "stderr"};
  const struct json_node *terminal = json_get(doc, root, "terminal");
  if (terminal != NULL) {
    /* All three are the terminal; its output is stream 1, and stdin "piped" lets the host type into it. */
    const struct json_node *raw = json_get(doc, terminal, "raw");
    if (!terminal_open(job, (unsigned)json_get(doc, terminal, "cols")->number,
                       (unsigned)json_get(doc, terminal, "rows")->number, raw != NULL && raw->type == JSON_TRUE, tty)) {
      err = errno;
      goto failed;
    }
    plan.tty = plan.stdio_fd[0] = plan.stdio_fd[1] = plan.stdio_fd[2] = tty[1];
    job->piped[0] = mode_is(doc, "stdin", "piped");
    job->piped[1] = true;
  }
  for (int fd = 0; fd < 3 && terminal == NULL; fd++) {
    if (mode_is(doc, names[fd], "piped")) {
      if (make_pipe(pipes[fd], job->sockets) != 0) {
        err = errno;
        goto failed;
      }
      job->piped[fd] = true;
      plan.stdio_fd[fd] = pipes[fd][fd == 0 ? 0 : 1];
    } else if (fd > 0 && mode_is(doc, names[fd], "inherit")) {
      plan.stdio_fd[fd] = -2;
    } else {
      plan.stdio_fd[fd] = -1; /* "null", and stdin "inherit": a worker has no terminal to share */
    }
  }
  plan.path = path;
  plan.argv = argv;
  plan.envp = envp;
  plan.cwd = cwd ? json_str(doc, cwd) : NULL;
  plan.detached = job->detached;
  plan.set_uid = uid != NULL;
  plan.set_gid = gid != NULL;
  plan.uid = uid ? (uid_t)uid->number : 0;
  plan.gid = gid ? (gid_t)gid->number : 0;
  plan.subreaper = job->kill_tree && !cgroup_enabled(); /* in a leaf, the leaf holds its whole tree */
  plan_limits(&plan, job);
  plan.leaf = -1;
  if (cgroup_enabled() && !job->detached) {
    /* memoryBytes and processes also bound the whole tree where the leaves have those controllers. */
    unsigned long long memory = job->limit_set[LIMIT_MEMORY] && cgroup_has("memory") ? job->limit_value[LIMIT_MEMORY] : 0;
    unsigned long long pids =
        job->limit_set[LIMIT_PROCESSES] && cgroup_has("pids") ? job->limit_value[LIMIT_PROCESSES] : 0;
    job->leaf = plan.leaf = cgroup_leaf_take(memory, pids);
    if (job->leaf < 0) {
      err = errno;
      goto failed;
    }
  }
  job->pid = start_child(&plan, &err);
  if (job->pid < 0 && err == ENOEXEC) {
    /* A script without "#!": the shell runs it, as execvp (and so Node) does. */
    char **script = xrealloc(NULL, (argc + 3) * sizeof *script);
    script[0] = "/bin/sh";
    script[1] = path;
    memcpy(script + 2, argv + 1, (argc + 1) * sizeof *argv);
    plan.path = "/bin/sh";
    plan.argv = script;
    job->pid = start_child(&plan, &err);
    free(script);
  }
  if (job->pid < 0) goto failed;

  if (terminal != NULL) {
    close(tty[1]);
    set_nonblocking(tty[0]);
    job->w_out[1].fd = tty[0];
    /* Its own descriptor, so that the loop can wait to write and to read apart (EMFILE: as a closed stdin). */
    if (job->piped[0]) job->w_stdin.fd = fcntl(tty[0], F_DUPFD_CLOEXEC, 3);
    goto done;
  }
  for (int fd = 0; fd < 3; fd++) {
    if (!job->piped[fd]) continue;
    close(pipes[fd][fd == 0 ? 0 : 1]);
    int mine = pipes[fd][fd == 0 ? 1 : 0];
    set_nonblocking(mine);
    if (fd == 0) job->w_stdin.fd = mine;
    else job->w_out[fd].fd = mine;
  }
  goto done;

failed:
  if (job->leaf >= 0) {
    cgroup_leaf_give_back(job->leaf);
    job->leaf = -1;
  }
  for (int fd = 0; fd < 3; fd++) {
    if (pipes[fd][0] >= 0) close(pipes[fd][0]);
    if (pipes[fd][1] >= 0) close(pipes[fd][1]);
    job->piped[fd] = false;
  }
  if (tty[0] >= 0) close(tty[0]);
  if (tty[1] >= 0) close(tty[1]);
  job->pid = -1;
  send_spawn_error(job->id, json_str(doc, cmd), err, code, NULL);
done:
  for (size_t k = 0; k < owned_count; k++) free(owned[k]);
  free(owned);
  free(argv);
  free(envb.entries);
  free(envb.name_lens);
  free(envb.table);
  free(path);
}
