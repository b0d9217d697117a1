/*
 * Starting a validated request's command: its argv and environment (spawn_env.c), the checks, the program's path, the
 * stdio plan (pipes, socketpairs or a terminal), the limits and cgroup leaf, the start itself (start_child.c) and the
 * shell's retry of a script without "#!"; and the SpawnError frame of a command that could not start.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
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

/* The request's names of the limits (core/limits.ts), in the order of the LIMIT_ constants. */
const char *const LIMIT_NAMES[LIMIT_COUNT] = {"cpuSeconds", "memoryBytes", "processes", "openFiles", "fileSizeBytes", "coreBytes"};
/* Their setrlimit resources. */
static const int LIMIT_RESOURCES[LIMIT_COUNT] = {RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_CORE};

static bool mode_is(const struct json_doc *doc, const char *name, const char *mode) {
  return strcmp(json_str(doc, json_get(doc, &doc->nodes[0], name)), mode) == 0;
}

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

/* The descriptors of a command's stdio while it starts: a pipe (or socketpair) per piped slot, or its terminal. */
struct stdio_plan {
  int pipes[3][2];
  int tty[2]; /* the terminal's controlling side, the command's side */
  bool terminal;
};

/*
 * Plans the command's stdio: on a terminal, all three are its side of the terminal; otherwise a pipe (or socketpair)
 * for each "piped" slot, the worker's own for an "inherit" stdout or stderr, /dev/null for the rest. 0, or an errno.
 */
static int plan_stdio(struct job *job, const struct json_doc *doc, struct child_plan *plan, struct stdio_plan *stdio) {
  const struct json_node *root = &doc->nodes[0];
  const struct json_node *terminal = json_get(doc, root, "terminal");
  if (terminal != NULL) {
    /* All three are the terminal; its output is stream 1, and stdin "piped" lets the host type into it. */
    const struct json_node *raw = json_get(doc, terminal, "raw");
    if (!terminal_open(job, (unsigned)json_get(doc, terminal, "cols")->number,
                       (unsigned)json_get(doc, terminal, "rows")->number, raw != NULL && raw->type == JSON_TRUE,
                       stdio->tty)) {
      return errno;
    }
    stdio->terminal = true;
    plan->tty = plan->stdio_fd[0] = plan->stdio_fd[1] = plan->stdio_fd[2] = stdio->tty[1];
    job->piped[0] = mode_is(doc, "stdin", "piped");
    job->piped[1] = true;
    return 0;
  }
  const char *names[3] = {"stdin", "stdout", "stderr"};
  for (int fd = 0; fd < 3; fd++) {
    if (mode_is(doc, names[fd], "piped")) {
      if (make_pipe(stdio->pipes[fd], job->sockets) != 0) return errno;
      job->piped[fd] = true;
      plan->stdio_fd[fd] = stdio->pipes[fd][fd == 0 ? 0 : 1];
    } else if (fd > 0 && mode_is(doc, names[fd], "inherit")) {
      plan->stdio_fd[fd] = -2;
    } else {
      plan->stdio_fd[fd] = -1; /* "null", and stdin "inherit": a worker has no terminal to share */
    }
  }
  return 0;
}

/* The cgroup leaf the command starts in, where the worker has cgroups and it is not detached: 0, or an errno. */
static int plan_leaf(struct job *job, struct child_plan *plan) {
  if (!cgroup_enabled() || job->detached) return 0;
  /* memoryBytes and processes also bound the whole tree where the leaves have those controllers. */
  unsigned long long memory = job->limit_set[LIMIT_MEMORY] && cgroup_has("memory") ? job->limit_value[LIMIT_MEMORY] : 0;
  unsigned long long pids =
      job->limit_set[LIMIT_PROCESSES] && cgroup_has("pids") ? job->limit_value[LIMIT_PROCESSES] : 0;
  job->leaf = plan->leaf = cgroup_leaf_take(memory, pids);
  return job->leaf < 0 ? errno : 0;
}

/* Starts the planned child; a script without "#!" (ENOEXEC) is run by the shell, as execvp (and so Node) does. */
static pid_t start_or_run_script(struct child_plan *plan, size_t argc, int *err) {
  pid_t pid = start_child(plan, err);
  if (pid >= 0 || *err != ENOEXEC) return pid;
  char **script = xrealloc(NULL, (argc + 3) * sizeof *script);
  script[0] = "/bin/sh";
  script[1] = (char *)plan->path;
  memcpy(script + 2, plan->argv + 1, (argc + 1) * sizeof *plan->argv);
  plan->path = "/bin/sh";
  plan->argv = script;
  pid = start_child(plan, err);
  free(script);
  return pid;
}

/* The child started: the worker closes the command's ends and keeps its own, non-blocking, as the job's streams. */
static void keep_stdio(struct job *job, const struct stdio_plan *stdio) {
  if (stdio->terminal) {
    close(stdio->tty[1]);
    set_nonblocking(stdio->tty[0]);
    job->w_out[1].fd = stdio->tty[0];
    /* Its own descriptor, so that the loop can wait to write and to read apart (EMFILE: as a closed stdin). */
    if (job->piped[0]) job->w_stdin.fd = fcntl(stdio->tty[0], F_DUPFD_CLOEXEC, 3);
    return;
  }
  for (int fd = 0; fd < 3; fd++) {
    if (!job->piped[fd]) continue;
    close(stdio->pipes[fd][fd == 0 ? 0 : 1]);
    int mine = stdio->pipes[fd][fd == 0 ? 1 : 0];
    set_nonblocking(mine);
    if (fd == 0) job->w_stdin.fd = mine;
    else job->w_out[fd].fd = mine;
  }
}

/* The start failed: its leaf goes back, every descriptor made for it is closed. */
static void undo_start(struct job *job, const struct stdio_plan *stdio) {
  if (job->leaf >= 0) {
    cgroup_leaf_give_back(job->leaf);
    job->leaf = -1;
  }
  for (int fd = 0; fd < 3; fd++) {
    if (stdio->pipes[fd][0] >= 0) close(stdio->pipes[fd][0]);
    if (stdio->pipes[fd][1] >= 0) close(stdio->pipes[fd][1]);
    job->piped[fd] = false;
  }
  if (stdio->tty[0] >= 0) close(stdio->tty[0]);
  if (stdio->tty[1] >= 0) close(stdio->tty[1]);
  job->pid = -1;
}

/* Whether a uid or gid (if given) is one setuid and setgid take. */
static bool id_in_range(const struct json_node *id) {
  return id == NULL || (id->number >= 0 && id->number <= (double)UINT32_MAX - 1);
}

/* Starts a validated request's command; on failure the host hears SpawnError and the job is freed. */
void start_job(struct job *job, const struct json_doc *doc) {
  const struct json_node *root = &doc->nodes[0];
  const struct json_node *cmd = json_get(doc, root, "cmd");
  const struct json_node *cwd = json_get(doc, root, "cwd");
  const struct json_node *uid = json_get(doc, root, "uid");
  const struct json_node *gid = json_get(doc, root, "gid");
  int err = 0;
  char *path = NULL;
  struct command_line line;
  command_line_build(&line, doc);
  struct stdio_plan stdio = {.pipes = {{-1, -1}, {-1, -1}, {-1, -1}}, .tty = {-1, -1}, .terminal = false};
  struct child_plan plan = {0};
  plan.tty = -1;
  plan.leaf = -1;

  /* Strings with a NUL inside cannot reach execve: the command fails as Node's spawn does (EINVAL). */
  if (line.has_nul || (cwd && cwd->has_nul) || !id_in_range(uid) || !id_in_range(gid)) {
    err = EINVAL;
    goto failed;
  }
  path = resolve_program(json_str(doc, cmd), line.envp, cwd ? json_str(doc, cwd) : NULL, &err);
  if (path == NULL || (err = plan_stdio(job, doc, &plan, &stdio)) != 0) goto failed;
  plan.path = path;
  plan.argv = line.argv;
  plan.envp = line.envp;
  plan.cwd = cwd ? json_str(doc, cwd) : NULL;
  plan.detached = job->detached;
  plan.set_uid = uid != NULL;
  plan.set_gid = gid != NULL;
  plan.uid = uid ? (uid_t)uid->number : 0;
  plan.gid = gid ? (gid_t)gid->number : 0;
  plan.subreaper = job->kill_tree && !cgroup_enabled(); /* in a leaf, the leaf holds its whole tree */
  plan.dies_with_worker = job_dies_with_worker(job);
  plan_limits(&plan, job);
  if ((err = plan_leaf(job, &plan)) != 0) goto failed;
  job->pid = start_or_run_script(&plan, line.argc, &err);
  if (job->pid < 0) goto failed;
  keep_stdio(job, &stdio);
  goto done;

failed:
  undo_start(job, &stdio);
  send_spawn_error(job->id, json_str(doc, cmd), err, NULL, NULL);
done:
  command_line_free(&line);
  free(path);
}
