/*
 * libFuzzer harness of what the worker reads from its host: arbitrary bytes through the incremental frame decoder
 * (native/host_frames.c decode()) into each frame's handling: spawn requests parsed (json.c), validated
 * (valid_request()) and started (spawn.c start_job(), vfork stubbed: stubs.c), stdin queued and written to the job's
 * pipe, kills (kill stubbed), credit and releases.
 *
 * An input is one byte k, then the bytes the host sends. Each input runs twice from the same clean state: as one read,
 * then cut into reads of 1 to 2^(k % 12) bytes (sizes from a generator seeded with k). Both runs must end alike: the
 * same frames sent back to the host, the same protocol error (the same exit code) or none, and no fd left open.
 * Each read reaches decode() at the very end of a heap buffer, so that ASan reports any read past it. read_channel()
 * itself (read(2) into a static buffer, then decode()) is not run.
 *
 * After each run, as the host closing the channel would end them, the jobs end (finish(), bury()) and the decoder's
 * partial frame is dropped; after a protocol error (exit() stubbed), what the stopped worker abandoned is freed.
 */
#include "../host_frames.c"

#include "fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>

/* The host's end of the channel: the worker writes its frames to channel.fd, the other end of a socketpair. */
static int host_fd = -1;

/* Where each read is handed to decode(): its last `len` bytes, ASan's redzone right after. */
static uint8_t *read_buf;
static size_t read_buf_size;

/* Reads what the worker wrote to the channel, into `into` (NULL: dropped); returns how many bytes. */
static size_t drain(struct buf *into) {
  static uint8_t buf[64 * 1024];
  size_t total = 0;
  for (;;) {
    ssize_t n = read(host_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return total;
    if (into != NULL) buf_put(into, buf, (size_t)n);
    total += (size_t)n;
  }
}

static void call_flush_out(void *arg) {
  (void)arg;
  flush_out();
}

/* Sends what the worker has pending, as its loop would (flush_out()), until nothing more comes. */
static void flush_all(struct buf *into) {
  for (;;) {
    int code;
    if (!fuzz_guarded(call_flush_out, NULL, &code)) fuzz_fail("flush_out() stopped the worker (exit %d)", code);
    if (drain(into) == 0) return;
  }
}

/* Ends every job as a closed channel would (the worker's stop()), without signals: each child is taken as gone. */
static void end_jobs(void *arg) {
  (void)arg;
  while (live != NULL) {
    struct job *job = live;
    if (!job->done) {
      job->exited = job->reaped = true;
      job->open[1] = job->open[2] = false;
      finish(job); /* Exit, and bury() unless stdin is still queued */
    }
    if (live == job) bury(job);
  }
  free_graves();
}

static void decode_read(void *arg) {
  size_t len = *(const size_t *)arg;
  decode(read_buf + read_buf_size - len, len);
}

struct run {
  bool stopped;
  int code;
  struct buf sent; /* the frames the worker sent the host */
};

static uint32_t next_random(uint32_t *state) {
  uint32_t x = *state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *state = x;
}

/* One run: `data` handed to decode() as one read (split < 0) or in reads of 1 to 2^split bytes. */
static void run(const uint8_t *data, size_t size, int split, struct run *r) {
  memset(r, 0, sizeof *r);
  if (size > read_buf_size) {
    free(read_buf);
    read_buf = malloc(size);
    if (read_buf == NULL) fuzz_fail("out of memory");
    read_buf_size = size;
  }
  uint32_t state = 0x9e3779b9u ^ ((uint32_t)(split + 1) * 0x85ebca6bu);
  fuzz_next_pid = FUZZ_FAKE_PID_BASE;
  fuzz_track_begin();
  for (size_t off = 0; off < size;) {
    size_t len = size - off;
    if (split >= 0) {
      size_t most = (size_t)1 << split;
      size_t pick = 1 + next_random(&state) % most;
      if (pick < len) len = pick;
    }
    memcpy(read_buf + read_buf_size - len, data + off, len);
    off += len;
    if (!fuzz_guarded(decode_read, &len, &r->code)) {
      r->stopped = true;
      break;
    }
  }
  fuzz_track_end();
  /* What stop() wrote on its way out (flush_out_at_exit(), at the process's first stop only) is dropped; the frames
   * it had pending are sent again by flush_out() here, so that both runs count the same bytes. */
  if (r->stopped) drain(NULL);
  flush_all(&r->sent);
  int code;
  if (!fuzz_guarded(end_jobs, NULL, &code)) fuzz_fail("ending the jobs stopped the worker (exit %d)", code);
  flush_all(NULL);
  free(dec.payload);
  memset(&dec, 0, sizeof dec);
  if (r->stopped) {
    /* The channel's output buffer (static in channel.c) is the worker's own: frame_begin(0) shows where it is. */
    fuzz_reclaim(frame_begin(0) - HEADER_BYTES);
  } else {
    fuzz_track_forget();
  }
}

/* The fds open now, ascending (at most `max`), from /proc/self/fd: the listing's own fd left out. */
static size_t open_fds(int *fds, size_t max) {
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) fuzz_fail("/proc/self/fd: %s", strerror(errno));
  size_t count = 0;
  for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
    if (entry->d_name[0] == '.') continue;
    int fd = atoi(entry->d_name);
    if (fd != dirfd(dir) && count < max) fds[count++] = fd;
  }
  closedir(dir);
  for (size_t i = 1; i < count; i++) { /* readdir gives them ascending; sorted all the same */
    for (size_t k = i; k > 0 && fds[k - 1] > fds[k]; k--) {
      int t = fds[k];
      fds[k] = fds[k - 1];
      fds[k - 1] = t;
    }
  }
  return count;
}

#define MAX_FDS 4096
static int fds_before[MAX_FDS], fds_after[MAX_FDS];

/* Fails when an fd is open that was not before the runs (fds_before, `before` of them), naming what it is. */
static void check_fds(size_t before, const char *run_name) {
  size_t after = open_fds(fds_after, MAX_FDS);
  for (size_t i = 0, k = 0; i < after; i++) {
    while (k < before && fds_before[k] < fds_after[i]) k++;
    if (k < before && fds_before[k] == fds_after[i]) continue;
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fds_after[i]);
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    fuzz_fail("fd %d (%s) left open by the run %s", fds_after[i], target, run_name);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_quiet_worker();
  signal(SIGPIPE, SIG_IGN); /* as signals_init(): a write to a pipe nobody reads fails with EPIPE */
  if (!loop_init()) fuzz_fail("epoll_create1: %s", strerror(errno));
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) fuzz_fail("socketpair: %s", strerror(errno));
  channel.fd = pair[0];
  host_fd = pair[1];
  set_nonblocking(channel.fd);
  set_nonblocking(host_fd);
  return 0;
}

/* Up to 64 bytes of what a run sent, from a little before `at`. */
static void dump(const char *what, const struct buf *b, size_t at) {
  size_t from = at > 16 ? at - 16 : 0;
  fprintf(fuzz_stderr, "%s, from byte %zu:", what, from);
  for (size_t i = from; i < b->len && i < from + 64; i++) fprintf(fuzz_stderr, " %02x", b->data[i]);
  fprintf(fuzz_stderr, "\n");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int split = data[0] % 12;
  data++;
  size--;
  size_t before = open_fds(fds_before, MAX_FDS);
  struct run whole, cut;
  run(data, size, -1, &whole);
  check_fds(before, "as one read");
  run(data, size, split, &cut);
  check_fds(before, "in several reads");
  if (whole.stopped != cut.stopped || whole.code != cut.code) {
    fuzz_fail("as one read the worker %s (exit %d); in reads of 1 to %d bytes it %s (exit %d)",
              whole.stopped ? "stopped" : "went on", whole.code, 1 << split, cut.stopped ? "stopped" : "went on",
              cut.code);
  }
  if (whole.sent.len != cut.sent.len || (whole.sent.len && memcmp(whole.sent.data, cut.sent.data, whole.sent.len))) {
    size_t at = 0;
    while (at < whole.sent.len && at < cut.sent.len && whole.sent.data[at] == cut.sent.data[at]) at++;
    dump("as one read", &whole.sent, at);
    dump("in reads", &cut.sent, at);
    fuzz_fail("as one read the worker sent %zu bytes, in reads of 1 to %d bytes %zu; they differ from byte %zu",
              whole.sent.len, 1 << split, cut.sent.len, at);
  }
  free(whole.sent.data);
  free(cut.sent.data);
  return 0;
}
