/*
 * What the native worker's files share: the protocol's constants, the types of a job and of the fds the loop waits
 * on, and one declaration for each function or variable used in more than one file. Every file includes it first (it
 * defines _GNU_SOURCE ahead of any system header).
 *
 *   main.c         startup: what the worker inherited, the channel, the hello, the loop
 *   event_loop.c   watches (epoll or poll), timers, dispatch, stop()
 *   signals.c      signal handlers, the signal pipe, SIGCHLD
 *   channel.c      frames to the host, and the unix channel's bootstrap
 *   host_frames.c  frames from the host: the decoder, request validation, each frame's handling
 *   jobs.c         the job table, exits, kills, the Exit frame
 *   streams.c      output pumping, credit, grace, the stdin queue
 *   spawn.c        start_job: a request's command planned (checks, stdio, limits, leaf) and started; SpawnError
 *   start_child.c  a planned child started: vfork + execve, or posix_spawn; the child's side before its exec
 *   spawn_env.c    a command's argv, its environment and its program's path
 *   terminal.c     a command's pseudo-terminal: opening it, resizing it, raw mode
 *   cgroup.c       cgroup v2 leaves: each command started, killed and measured in its own
 *   cgroup_root.c  cgroup_init: the root of the leaves, its controllers, what this kernel does
 *   cgroup_fork.c  starting a process in a leaf (clone3, or fork and a migration)
 *   cgroup_files.c a cgroup's files, its events, freezing and killing what it holds (cgroup.h: what these share)
 *   cgroup_stubs.c the cgroup functions on systems other than Linux
 *   tree.c         a command's whole tree: finding it, stopping it, signalling it
 *   proc_children.c  what /proc (or libproc) says of a process: its parent, group and children (tree.h)
 *   subreaper.c    the worker as subreaper, and the orphans it adopts
 *   wire_names.c   signal and errno names
 *   buffer.c       xrealloc and the growable byte buffer
 *   json.c         the JSON parser
 */
#ifndef SPAWNPOOL_WORKER_H
#define SPAWNPOOL_WORKER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <termios.h>

/* SPAWNPOOL_FORCE_POLL builds, on Linux, what other systems run: poll() and SIGCHLD instead of epoll and pidfd. */
#if defined(__linux__) && !defined(SPAWNPOOL_FORCE_POLL)
#include <sys/epoll.h>
#include <sys/syscall.h>
#define USE_EPOLL 1
#else
#include <poll.h>
#define USE_EPOLL 0
#endif

/* The protocol (core/frame.ts). */
#define PROTOCOL_VERSION 6
#define HEADER_BYTES 9
#define MAX_PAYLOAD_BYTES (64u * 1024u * 1024u)
#define SECRET_BYTES 32

enum frame_type {
  F_SPAWN = 1,
  F_STDIN = 2,
  F_STDIN_END = 3,
  F_KILL = 4,
  F_CREDIT = 5,
  F_RELEASE = 6,
  F_TERMINAL = 7,
  F_HELLO = 16,
  F_SPAWNED = 17,
  F_SPAWN_ERROR = 18,
  F_STDOUT = 19,
  F_STDERR = 20,
  F_STREAM_END = 21,
  F_STDIN_ACK = 22,
  F_EXIT = 23,
  F_EXITED = 24,
};

/* The Terminal frame's operations (core/frame.ts TerminalOp): u8 op, then u16 cols, u16 rows; or u8 on (0 or 1). */
enum { TERMINAL_RESIZE = 1, TERMINAL_RAW = 2 };

/* As worker/_output_sender.ts: output frames of at most 1 MiB, and the quiet period that releases a grandchild's
 * streams. */
#define MAX_CHUNK_BYTES (1024 * 1024)
#define STREAM_GRACE_US (200 * 1000)
/*
 * How long a buffered command's Spawned frame may wait to go out with its Exit (send_spawned): a short command's whole
 * answer then reaches the host in one write and one wake-up, not two, and the host skips its check of a pid it will
 * never signal (core/worker_handle.ts: a read of /proc, a tenth of a busy host's time). Nothing of a buffered request
 * shows its pid to a user. The host ends the commands of a worker that died by the pids it was told of; on Linux the
 * kernel also kills a command that is neither detached nor killTree when its worker dies (PR_SET_PDEATHSIG,
 * start_child.c), so the hold of such a command covers most commands of a busy pool. A killTree command must outlive
 * its worker for the host to walk its tree, so the host is told of it within SPAWNED_HOLD_US.
 */
#define SPAWNED_HOLD_US (2 * 1000)
#ifdef __linux__
#define SPAWNED_HOLD_DIES_WITH_WORKER_US (50 * 1000)
#else
#define SPAWNED_HOLD_DIES_WITH_WORKER_US SPAWNED_HOLD_US
#endif
/* After the exit, streamed output may run this many windows ahead of credit (core/frame.ts EXIT_TAIL_WINDOWS). */
#define EXIT_TAIL_WINDOWS 2
/* A released socket is closed once its writer has written nothing for LINGER_STILL_US and is blocked on a full socket,
 * or has written nothing for LINGER_IDLE_US, or after LINGER_MAX_US: see release_stream(). */
#define LINGER_STILL_US 1000
#define LINGER_IDLE_US (20 * 1000)
#define LINGER_MAX_US (100 * 1000)
/* The channel's read buffer (core/adapter.ts LENDING_READ_BYTES) and one read of a buffered command's output. */
#define CHANNEL_READ_BYTES (256 * 1024)
#define OUTPUT_READ_BYTES (64 * 1024)

static inline void put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static inline uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

struct buf {
  uint8_t *data;
  size_t len;
  size_t cap;
};

/* Watches: the fds the loop waits on. */
enum watch_kind { W_CHANNEL, W_SIGNALS, W_STDIN, W_OUTPUT, W_EXIT };
enum { WANT_IN = 1, WANT_OUT = 2 };

struct job;

struct watch {
  int fd;
  uint8_t kind;
  uint8_t stream; /* W_OUTPUT: 1 or 2 */
  uint8_t events; /* WANT_IN | WANT_OUT currently registered */
  struct job *job;
};

/* Jobs: one per spawn request. */
struct stdin_op {
  struct stdin_op *next;
  uint8_t *data; /* NULL: close stdin */
  size_t len;
  size_t off;
};

/* The limits a request may set (core/limits.ts), as setrlimit's resources; LIMIT_NAMES in spawn.c names them. */
enum { LIMIT_CPU, LIMIT_MEMORY, LIMIT_PROCESSES, LIMIT_OPEN_FILES, LIMIT_FILE_SIZE, LIMIT_CORE, LIMIT_COUNT };
extern const char *const LIMIT_NAMES[LIMIT_COUNT];

struct job {
  uint32_t id;
  struct job *hash_next;
  struct job *prev, *next; /* every live job, for timers and stop() */
  struct job *grave_next;
  pid_t pid;
  bool buffered, detached, sockets, piped[3]; /* sockets: piped stdio as socketpairs (Node and Bun give those) */
  bool kill_tree; /* the command is a subreaper of its own tree, and every kill reaches all of it (tree.c) */
  bool limit_set[LIMIT_COUNT];
  unsigned long long limit_value[LIMIT_COUNT];
  const char *limit_hit; /* which limit ended the command, when the kernel says so: "cpu", "fileSize", ... */
  int leaf;              /* its cgroup leaf (cgroup.c), or -1 */
  bool terminal;         /* on a pseudo-terminal (terminal.c): w_out[1] and w_stdin are its controlling side */
  bool raw;              /* the terminal is in raw mode; `cooked` holds the settings to go back to */
  struct termios cooked;
  bool done;   /* Exit sent: the id is free, only stdin may still drain */
  bool exited; /* the child exited: it stays a zombie, unreaped, until the job is done */
  bool reaped; /* its pid (and process group id) may be reused now: nothing more is signalled */
  int code, sig;
  const char *reason;
  int kill_signal;
  double window, force_kill_ms, timeout_ms;
  bool has_timeout, has_max_buffer;
  double max_buffer;
  struct watch w_stdin, w_out[3], w_exit;
  bool open[3], paused[3];
  bool lingering[3];   /* released by the host, not yet closed: see release_stream() */
  bool wrote[3];       /* whether anything was read from the stream yet */
  bool pipe_grown[3];  /* its pipe was grown (streams.c collect), and counts against the worker's grown pipes */
  int linger_unread[3]; /* bytes unread at the last look */
  int64_t linger_since[3]; /* when that count was first seen */
  double unacked[3];
  struct buf collected[3];
  size_t collected_bytes;
  double total_bytes;
  struct rusage usage; /* the command's, from waitid (Linux, at its exit) or wait4 (at the reap) */
  bool has_usage;
  struct stdin_op *stdin_head, *stdin_tail;
  int64_t timeout_at, force_at, grace_at; /* monotonic us; 0: not armed */
  int64_t linger_at, linger_until;         /* the next look at lingering sockets, and the last */
  int64_t spawned_at; /* when its held Spawned frame goes out (SPAWNED_HOLD_US), if not with its Exit; -1: sent */
};

/*
 * Whether a command is started to die with its worker (Linux: PR_SET_PDEATHSIG): neither detached (it outlives the
 * worker) nor killTree (it lives until the host has walked its tree).
 */
static inline bool job_dies_with_worker(const struct job *job) {
  return !job->detached && !job->kill_tree;
}

/*
 * An environment being built: entries with their names' lengths, and an open-addressing table of their indices (+1,
 * 0: empty) by name, so that merging a request's env into the inherited one takes linear time.
 */
struct env_builder {
  char **entries;
  size_t *name_lens;
  size_t count;
  size_t *table;
  size_t mask;
};

/* A request's argv and environment as execve takes them (spawn_env.c command_line_build; command_line_free). */
struct command_line {
  char **argv;  /* argv0 (else cmd), then args; NULL-terminated */
  size_t argc;  /* the arguments after argv[0] */
  char **envp;  /* env.entries, NULL-terminated */
  bool has_nul; /* a string that cannot reach execve: the command fails with EINVAL */
  struct env_builder env;
  char **owned; /* the "NAME=value" entries made for the request's env */
  size_t owned_count;
};

/* How a command is to be started (spawn.c makes it, start_child.c carries it out). */
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
  bool dies_with_worker;       /* SIGKILLed by the kernel when the worker dies (Linux: PR_SET_PDEATHSIG) */
  int leaf;                    /* the cgroup leaf it starts in (cgroup.c), or -1 */
  int limit_count;
  int limit_resource[LIMIT_COUNT];
  struct rlimit limit[LIMIT_COUNT];
};

struct json_doc;

/* buffer.c */
void *xrealloc(void *p, size_t size);
void buf_reserve(struct buf *b, size_t extra);
void buf_put(struct buf *b, const void *p, size_t n);
void buf_free(struct buf *b);
/* Room for one more read in a command's collected output (a spare buffer when there is one); given back with buf_release. */
void buf_reserve_output(struct buf *b);
void buf_release(struct buf *b);
/* An empty buffer of SPARE_MAX_BYTES (buffer.c), a spare one when there is one; into `b`, which holds nothing. */
void buf_take_spare(struct buf *b);

/* wire_names.c */
int signal_number(const char *name, size_t len);
const char *signal_name(int sig);
const char *errno_name(int err);

/* event_loop.c */
int64_t now_us(void);
int64_t deadline_after(double ms);
void watch_set(struct watch *w, uint8_t events);
void watch_close(struct watch *w);
void set_nonblocking(int fd);
bool loop_init(void);
void stop(int code);
void loop(void);

/* signals.c */
#ifdef SYS_pidfd_open
extern bool use_pidfd;
#endif
extern struct watch signal_watch;
extern sigset_t changed_signals; /* every signal the worker ignores or handles */
void read_signals(void);
bool signals_init(void);

/* channel.c */
extern struct watch channel;
extern bool output_held;
uint8_t *frame_begin(size_t max_payload);
void frame_end(uint8_t type, uint32_t id, size_t length);
/* A frame whose payload is `length` bytes, `in_place` of them built after frame_begin, the rest to follow (send_owned). */
void frame_end_partial(uint8_t type, uint32_t id, size_t length, size_t in_place);
/* The bytes of `b` go out next, after what is queued: taken over (b is left empty), not copied, unless small. */
void send_owned(struct buf *b);
void send_frame(uint8_t type, uint32_t id, const void *payload, size_t length);
void flush_out(void);
void flush_out_at_exit(void);
/* Sets up the channel's socket once connected: a larger send buffer. */
void channel_tune(int fd);
int connect_from_bootstrap(void);

/* host_frames.c */
void read_channel(void);

/* jobs.c */
extern struct job *live;
struct job *find_job(uint32_t id);
void track_job(struct job *job);
void bury(struct job *job);
void free_graves(void);
enum kill_scope { KILL_PID, KILL_GROUP, KILL_TREE };
void kill_child(struct job *job, int sig, enum kill_scope scope);
void kill_group_for_good(struct job *job);
void send_spawned(struct job *job);
void finish(struct job *job);
void stop_for(struct job *job, const char *reason, int sig);
void check_exit(struct job *job);

/* streams.c */
void arm_grace(struct job *job);
void hold_buffered_output(bool hold);
void close_stream(struct job *job, int fd, bool tell);
/* The stream's pipe, closed, no longer counts as grown. */
void forget_grown_pipe(struct job *job, int fd);
void release_streams(struct job *job);
void release_stream(struct job *job, int fd);
void check_lingering(struct job *job);
void update_pause(struct job *job, int fd);
void read_output(struct job *job, int fd);
bool output_waiting(struct job *job);
void drain_stdin(struct job *job);
void queue_stdin(struct job *job, uint8_t *data, size_t len);

/* spawn_env.c */
void env_init(struct env_builder *env, size_t room);
void env_put(struct env_builder *env, char *entry, size_t name_len, bool replace);
char *resolve_program(const char *cmd, char *const *envp, const char *cwd, int *err);
void command_line_build(struct command_line *line, const struct json_doc *doc);
void command_line_free(struct command_line *line);

/* terminal.c */
/*
 * Opens a pseudo-terminal for `job` of `cols` x `rows`, in raw mode if asked: fds[0] its controlling side, fds[1] the
 * command's side, both close-on-exec. False with errno.
 */
bool terminal_open(struct job *job, unsigned cols, unsigned rows, bool raw, int fds[2]);
/* A Terminal frame's payload for the job: false if it is malformed (a resize to 0, an unknown operation). */
bool terminal_control(struct job *job, const uint8_t *payload, size_t len);

/* tree.c */
void tree_signal(struct job *job, int sig);
void tree_before_spawn(const struct job *job);
void tree_spawn_failed(const struct job *job);
void tree_after_exit(const struct job *job);
void reap_adopted(void);

/* spawn.c */
void send_spawn_error(uint32_t id, const char *cmd, int err, const char *code, const char *message);
void start_job(struct job *job, const struct json_doc *doc);

/* start_child.c */
/* Starts the planned child: its pid, or -1 with the errno of the failed start in `err` (ENOEXEC: a script without "#!"). */
pid_t start_child(const struct child_plan *plan, int *err);

/* cgroup.c (Linux, cgroup v2; elsewhere stubs: cgroup_init fails with "cgroups are Linux-only") */
/* A command's usage, from its leaf's counters since the command took the leaf. */
struct cgroup_usage {
  unsigned long long usage_us, user_us, system_us; /* cpu.stat */
  unsigned long long memory_peak;                  /* memory.peak, bytes: only if has_memory_peak */
  bool has_memory_peak;
  unsigned long long oom_kills;       /* memory.events oom_kill (0 without the memory controller) */
  unsigned long long pids_max_events; /* pids.events max: forks pids.max refused (0 without the pids controller) */
};
/*
 * Makes `path` (absolute, a cgroup v2 directory in which this worker can make a cgroup and start a process) the root
 * of this worker's leaves, enabling memory, pids and cpu for them where `path` has them. False with a one-line reason
 * in `why`; on success `why` is empty, or says which of those controllers the leaves lack and why.
 */
bool cgroup_init(const char *path, char *why, size_t why_len);
bool cgroup_enabled(void);
/* Whether the leaves have the controller "memory", "pids" or "cpu". */
bool cgroup_has(const char *controller);
/*
 * A leaf for a new command, empty, its usage counted from now: a free one, or a new "<root>/spawnpool-<pid>-<n>". With
 * memory.max / pids.max of `memory_max` bytes / `pids_max` processes (0: none). Its index; -1 with errno (ENOTSUP: a
 * limit whose controller the leaves lack).
 */
int cgroup_leaf_take(unsigned long long memory_max, unsigned long long pids_max);
/* The leaf's directory, O_PATH: clone3's `cgroup`. Open while the leaf exists; the worker's to close, not the caller's. */
int cgroup_leaf_fd(int leaf);
/*
 * fork(), but the child starts in the leaf (clone3 with CLONE_INTO_CGROUP; before Linux 5.7, fork and a migration
 * before it returns). 0 in the child, which must only make system calls until it execs or _exits; the pid in the
 * parent; -1 with errno. Call it with the worker's signals blocked, as vfork.
 */
pid_t cgroup_fork_into(int leaf);
/* SIGKILLs everything in the leaf (cgroup.kill; before Linux 5.14, freeze, kill each, thaw). */
void cgroup_leaf_kill(int leaf);
/* Sends `sig` to everything in the leaf: frozen (at most 100 ms' wait), each process signalled, thawed. */
void cgroup_leaf_signal(int leaf, int sig);
/* Whether any process is left in the leaf (cgroup.events populated). */
bool cgroup_leaf_populated(int leaf);
/* The usage of the leaf's command so far: see struct cgroup_usage. */
void cgroup_leaf_usage(int leaf, struct cgroup_usage *usage);
/* Frees the leaf for another command once its job is done, killing what is left in it. */
void cgroup_leaf_give_back(int leaf);
/* At the worker's exit: kills what is in every leaf and removes them (waiting up to 1 s for their processes to go). */
void cgroup_cleanup(void);

#endif
