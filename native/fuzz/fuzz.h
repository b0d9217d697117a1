/*
 * What the libFuzzer harnesses (fuzz_frames.c, fuzz_json.c) share with their stubs (stubs.c). Each harness compiles
 * native/host_frames.c into itself (#include), so that it can call the file's static decoder and validator and reset
 * the decoder's state between inputs; every other .c file of native/ but main.c is linked as it is. See README.md here.
 */
#ifndef SPAWNPOOL_FUZZ_H
#define SPAWNPOOL_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* libFuzzer's entry points. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Runs fn(arg) as worker code: an exit() or _exit() inside it (stop(), after a protocol error) returns here, false,
 * with its code in *code; true when fn returned. The worker's kill() and vfork() are stubbed while it runs.
 */
bool fuzz_guarded(void (*fn)(void *), void *arg, int *code);

/* The process's stderr before fuzz_quiet_worker() pointed the worker's at /dev/null (FUZZ_VERBOSE=1: it does not). */
extern FILE *fuzz_stderr;
void fuzz_quiet_worker(void);

/* The pid the next stubbed vfork() returns: past Linux's PID_MAX_LIMIT (2^22), so it can never name a process. */
#define FUZZ_FAKE_PID_BASE 0x40000000
extern int fuzz_next_pid;

/*
 * What a worker stopped by a protocol error abandons on its way out (the real one exits): the blocks the worker's code
 * allocates (in fuzz_guarded()) between fuzz_track_begin() and fuzz_track_end() and that are not freed since.
 * fuzz_reclaim() frees those (but `keep`) and forgets them; fuzz_track_forget() only forgets them (what is left then is
 * a leak, for LeakSanitizer).
 */
void fuzz_track_begin(void);
void fuzz_track_end(void);
void fuzz_track_forget(void);
void fuzz_reclaim(const void *keep);

/* A failed check of a harness: prints what, then aborts (libFuzzer saves the input as a crash). */
_Noreturn void fuzz_fail(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif
