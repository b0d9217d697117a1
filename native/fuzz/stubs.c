/*
 * The stubs of the fuzz harnesses: the worker's side effects that must not happen in a fuzzer, replaced at the lowest
 * level there is, the C library's entry points, with the linker's --wrap (tools/fuzz_native.mjs links with
 * -Wl,--wrap=exit,--wrap=_exit,--wrap=kill,--wrap=vfork and the three below). Only while worker code runs
 * (fuzz_guarded()); libFuzzer's and the harness's own calls reach the real functions.
 *
 *   exit, _exit  the worker's way out (stop(), after a protocol error; xrealloc out of memory): back to the harness,
 *                which cleans up as the process's end would have.
 *   kill         no signal is sent; it succeeds (a kill, a timeout's group kill, stop()'s SIGKILL of every group).
 *   vfork        no process starts: it returns a fake pid past PID_MAX_LIMIT, as a child that exec'd at once would
 *                (native/start_child.c then reads EOF from its report pipe: the exec worked).
 *
 * Everything else is real: the request's pipes and socketpairs, epoll, the program's lookup (stat, access) along PATH,
 * and the frames the worker sends, written to a socketpair that the harness reads.
 *
 * And malloc, realloc and strdup (--wrap=malloc,--wrap=realloc,--wrap=strdup) pass through, recording, while tracking,
 * the blocks the worker's own code allocates (not the C library's, such as a stdio buffer), for fuzz_reclaim().
 */
#include "fuzz.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <sanitizer/allocator_interface.h>

static jmp_buf exit_jump;
static volatile bool in_worker;
static volatile int exit_code;
int fuzz_next_pid = FUZZ_FAKE_PID_BASE;
FILE *fuzz_stderr;

bool fuzz_guarded(void (*fn)(void *), void *arg, int *code) {
  if (setjmp(exit_jump) != 0) {
    in_worker = false;
    *code = exit_code;
    return false;
  }
  in_worker = true;
  fn(arg);
  in_worker = false;
  return true;
}

_Noreturn void __real_exit(int code);
_Noreturn void __real__exit(int code);
int __real_kill(pid_t pid, int sig);
_Noreturn void __wrap_exit(int code);
_Noreturn void __wrap__exit(int code);
int __wrap_kill(pid_t pid, int sig);
pid_t __wrap_vfork(void);

_Noreturn void __wrap_exit(int code) {
  if (in_worker) {
    exit_code = code;
    longjmp(exit_jump, 1);
  }
  __real_exit(code);
}

_Noreturn void __wrap__exit(int code) {
  if (in_worker) {
    exit_code = code;
    longjmp(exit_jump, 1);
  }
  __real__exit(code);
}

int __wrap_kill(pid_t pid, int sig) {
  if (in_worker) return 0;
  return __real_kill(pid, sig);
}

pid_t __wrap_vfork(void) {
  /* Nothing else in the process calls vfork: a call from outside the worker is a harness bug. */
  if (!in_worker) fuzz_fail("vfork() called outside the worker");
  return fuzz_next_pid++;
}

void fuzz_quiet_worker(void) {
  fuzz_stderr = stderr;
  if (getenv("FUZZ_VERBOSE") != NULL) return;
  /* The worker's messages (a protocol error's "...; closing", one per input) go nowhere, unbuffered as stderr is; the
   * sanitizers and libFuzzer write to fd 2 themselves, and the harness to fuzz_stderr. */
  FILE *null = fopen("/dev/null", "w");
  if (null != NULL && setvbuf(null, NULL, _IONBF, 0) == 0) stderr = null;
}

_Noreturn void fuzz_fail(const char *format, ...) {
  FILE *out = fuzz_stderr != NULL ? fuzz_stderr : stderr;
  va_list ap;
  va_start(ap, format);
  fprintf(out, "fuzz harness check failed: ");
  vfprintf(out, format, ap);
  fprintf(out, "\n");
  va_end(ap);
  fflush(out);
  abort();
}

/* ---------------------------------------------------------------------------------------------------------------- */
/*
 * Blocks abandoned at a stop: the set of the blocks the worker's code allocated (malloc, realloc, strdup) while
 * tracking, and that were not freed since (ASan's free hook takes them out), in an open-addressing table that a log of
 * the slots written clears; fuzz_reclaim() frees exactly those, never a block allocated later at an address that was
 * in the set once, nor one the C library allocated for itself.
 */

#define SLOTS (1u << 17)
#define MAX_INSERTS (SLOTS / 2) /* the table is never more than half full: probes end */
#define TOMB ((const void *)1)
static const void *table[SLOTS];
static uint32_t inserted[MAX_INSERTS]; /* the slots written since the last clear */
static size_t insert_count;
static bool overflow;
static bool tracking, hooks_installed;
static _Thread_local bool is_worker_thread;

static uint32_t slot_of(const void *p) {
  return (uint32_t)((((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15u) >> 40) & (SLOTS - 1);
}

static void record(const void *p) {
  if (!tracking || !in_worker || p == NULL) return;
  if (insert_count == MAX_INSERTS) {
    overflow = true;
    return;
  }
  uint32_t slot = slot_of(p), free_slot = UINT32_MAX;
  for (; table[slot] != NULL; slot = (slot + 1) & (SLOTS - 1)) {
    if (table[slot] == p) return; /* a realloc in place */
    if (table[slot] == TOMB && free_slot == UINT32_MAX) free_slot = slot;
  }
  if (free_slot != UINT32_MAX) slot = free_slot;
  table[slot] = p;
  inserted[insert_count++] = slot;
}

void *__real_malloc(size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);

void *__wrap_malloc(size_t size) {
  void *p = __real_malloc(size);
  record(p);
  return p;
}

void *__wrap_realloc(void *p, size_t size) {
  void *q = __real_realloc(p, size);
  record(q);
  return q;
}

char *__wrap_strdup(const char *s) {
  char *p = __real_strdup(s);
  record(p);
  return p;
}

static void on_malloc(const volatile void *p, size_t size) {
  (void)p;
  (void)size;
}

static void on_free(const volatile void *p) {
  if (!is_worker_thread || insert_count == 0 || p == NULL) return;
  for (uint32_t slot = slot_of((const void *)p); table[slot] != NULL; slot = (slot + 1) & (SLOTS - 1)) {
    if (table[slot] == (const void *)p) {
      table[slot] = TOMB;
      return;
    }
  }
}

static void clear_table(void) {
  for (size_t i = 0; i < insert_count; i++) table[inserted[i]] = NULL;
  insert_count = 0;
  overflow = false;
}

void fuzz_track_begin(void) {
  if (!hooks_installed) {
    is_worker_thread = true;
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
    hooks_installed = true;
  }
  clear_table();
  tracking = true;
}

void fuzz_track_end(void) {
  tracking = false;
}

void fuzz_track_forget(void) {
  tracking = false;
  clear_table();
}

void fuzz_reclaim(const void *keep) {
  tracking = false;
  /* Past the table's room, what was abandoned stays allocated (LeakSanitizer may report it): never seen so far. */
  if (overflow) {
    fprintf(fuzz_stderr != NULL ? fuzz_stderr : stderr, "fuzz harness: over %u allocations in one run\n", MAX_INSERTS);
  } else {
    /* free() empties the slot (on_free): a slot logged twice is seen empty the second time. */
    for (size_t i = 0; i < insert_count; i++) {
      const void *p = table[inserted[i]];
      if (p != NULL && p != TOMB && p != keep) free((void *)p);
    }
  }
  clear_table();
}
