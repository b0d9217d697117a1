/*
 * The machine's spawn ceiling, for comparison with bench/compare.ts: runs a command N times with
 * posix_spawnp, K in flight, from one thread, and prints one JSON line with spawns/s and the CPU per
 * spawn of this process and of the commands. `npm start` builds and runs it when a C compiler is
 * installed.
 *
 * By default the commands' output goes to /dev/null, which no pool can match for a command with
 * output: the pool carries every byte back. With --collect each command's stdout is a pipe that
 * this process reads to its end (with poll, into one buffer it reuses) before it counts the
 * command done: the least any spawner that returns a command's output must do.
 *
 * It also prints each command's latency (from its posix_spawnp to its exit and, with --collect, the end of its
 * output), median and 90th percentile: at K = 1, the least a command can take on this machine from a caller that
 * waits for it (bench/hop.ts sets it beside each runtime's own spawn and the pool's).
 *
 * Usage: spawn_loop [--collect] N K command [args...]
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_IN_FLIGHT 256

static double micros(struct timeval t) { return t.tv_sec * 1e6 + t.tv_usec; }

static double ms_between(struct timespec a, struct timespec b) {
  return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A slot for a command in flight: its pid (0 once reaped) and the read end of its stdout (-1 once at EOF or
 * without --collect); it is free again when both are done. */
struct command {
  int busy;
  pid_t pid;
  int fd;
  struct timespec started;
};

static int check_status(int status, const char *name) {
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s failed\n", name);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int collect = argc > 1 && strcmp(argv[1], "--collect") == 0;
  if (collect) {
    argv++;
    argc--;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: %s [--collect] N K command [args...]\n", argv[0]);
    return 2;
  }
  int total = atoi(argv[1]), in_flight = atoi(argv[2]);
  if (total < 1 || in_flight < 1 || in_flight > MAX_IN_FLIGHT) {
    fprintf(stderr, "N must be at least 1, K from 1 to %d\n", MAX_IN_FLIGHT);
    return 2;
  }
  struct command commands[MAX_IN_FLIGHT];
  struct pollfd fds[MAX_IN_FLIGHT];
  int slot_of[MAX_IN_FLIGHT];
  static char buffer[65536];
  long long bytes = 0;
  for (int i = 0; i < in_flight; i++) commands[i] = (struct command){0, 0, -1, {0, 0}};
  double *latencies = malloc(sizeof(double) * (size_t)total);
  if (latencies == NULL) {
    perror("malloc");
    return 1;
  }

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int started = 0, done = 0;
  while (done < total) {
    for (int i = 0; i < in_flight && started < total; i++) {
      if (commands[i].busy) continue;
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      int pipe_fds[2] = {-1, -1};
      if (collect) {
        if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
          perror("pipe2");
          return 1;
        }
        posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
      } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
      }
      struct timespec begun;
      clock_gettime(CLOCK_MONOTONIC, &begun);
      pid_t pid;
      int error = posix_spawnp(&pid, argv[3], &actions, NULL, argv + 3, environ);
      posix_spawn_file_actions_destroy(&actions);
      if (collect) close(pipe_fds[1]);
      if (error != 0) {
        fprintf(stderr, "posix_spawnp %s: %s\n", argv[3], strerror(error));
        return 1;
      }
      commands[i] = (struct command){1, pid, pipe_fds[0], begun};
      started++;
    }
    /* Read what the commands wrote; with nothing left to read, wait for one to exit. */
    int polled = 0;
    for (int i = 0; i < in_flight; i++) {
      if (commands[i].fd == -1) continue;
      fds[polled] = (struct pollfd){.fd = commands[i].fd, .events = POLLIN};
      slot_of[polled++] = i;
    }
    if (polled > 0) {
      if (poll(fds, (nfds_t)polled, -1) < 0 && errno != EINTR) {
        perror("poll");
        return 1;
      }
      for (int p = 0; p < polled; p++) {
        if (fds[p].revents == 0) continue;
        struct command *c = &commands[slot_of[p]];
        ssize_t n = read(c->fd, buffer, sizeof buffer);
        if (n > 0) {
          bytes += n;
        } else if (n == 0 || errno != EINTR) {
          close(c->fd);
          c->fd = -1;
        }
      }
    }
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, polled > 0 ? WNOHANG : 0)) > 0) {
      if (check_status(status, argv[3]) != 0) return 1;
      for (int i = 0; i < in_flight; i++) {
        if (commands[i].pid == pid) commands[i].pid = 0;
      }
      if (polled == 0) break;
    }
    if (pid < 0 && errno != ECHILD) {
      perror("waitpid");
      return 1;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    for (int i = 0; i < in_flight; i++) {
      struct command *c = &commands[i];
      if (c->busy && c->pid == 0 && c->fd == -1) {
        c->busy = 0;
        latencies[done++] = ms_between(c->started, now);
      }
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  struct rusage self, children;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  double seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  qsort(latencies, (size_t)total, sizeof(double), by_value);
  printf("{\"perSec\":%.0f,\"selfUs\":%.0f,\"commandsUs\":%.0f,\"bytesPerSpawn\":%.0f,\"p50Ms\":%.3f,\"p90Ms\":%.3f}\n",
         total / seconds, (micros(self.ru_utime) + micros(self.ru_stime)) / total,
         (micros(children.ru_utime) + micros(children.ru_stime)) / total, (double)bytes / total,
         latencies[total / 2], latencies[(int)(total * 0.9)]);
  free(latencies);
  return 0;
}
