/*
 * The machine's spawn ceiling, for comparison with bench/compare.ts: runs a command N times with
 * posix_spawnp, K in flight, from one thread, output to /dev/null, and prints one JSON line with
 * spawns/s and the CPU per spawn of this process and of the commands. `npm start` builds and runs it
 * when a C compiler is installed.
 *
 * Usage: spawn_loop N K command [args...]
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double micros(struct timeval t) { return t.tv_sec * 1e6 + t.tv_usec; }

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s N K command [args...]\n", argv[0]);
    return 2;
  }
  int total = atoi(argv[1]), in_flight = atoi(argv[2]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int started = 0, done = 0, running = 0;
  while (done < total) {
    while (running < in_flight && started < total) {
      pid_t pid;
      int error = posix_spawnp(&pid, argv[3], &actions, NULL, argv + 3, environ);
      if (error != 0) {
        fprintf(stderr, "posix_spawnp %s: error %d\n", argv[3], error);
        return 1;
      }
      started++;
      running++;
    }
    int status;
    if (wait(&status) < 0) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "%s failed\n", argv[3]);
      return 1;
    }
    running--;
    done++;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  struct rusage self, children;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  double seconds = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("{\"perSec\":%.0f,\"selfUs\":%.0f,\"commandsUs\":%.0f}\n", total / seconds,
         (micros(self.ru_utime) + micros(self.ru_stime)) / total,
         (micros(children.ru_utime) + micros(children.ru_stime)) / total);
  return 0;
}
