/*
 * Terminals: a command run on a pseudo-terminal of its own. The worker opens the pair (terminal_open), the command gets
 * the subordinate side as its stdin, stdout, stderr and controlling terminal (exec_child in start_child.c: setsid, then
 * TIOCSCTTY), and the worker keeps the controlling side: read as the job's stream 1 with the same credit as a pipe,
 * written (a second descriptor of it) as the job's stdin. The Terminal frame resizes it (TIOCSWINSZ, which sends the
 * foreground process group SIGWINCH) or sets raw mode. Its output ends with EIO once nothing holds the subordinate side
 * any more: after everything written to it was read.
 */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

/* The terminal's size as the command reads it (TIOCGWINSZ). */
static int set_size(int fd, unsigned cols, unsigned rows) {
  struct winsize size;
  memset(&size, 0, sizeof size);
  size.ws_col = (unsigned short)cols;
  size.ws_row = (unsigned short)rows;
  return ioctl(fd, TIOCSWINSZ, &size);
}

static bool cloexec(int fd) {
  int flags = fcntl(fd, F_GETFD);
  return flags >= 0 && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == 0;
}

/*
 * Raw mode as Bun's Terminal and libuv's TTY set it: no line editing, echo or signal keys, input bytes as typed;
 * output processing (ONLCR) stays on. `cooked` receives the settings it replaces, for raw mode's end.
 */
static int set_raw(int fd, struct termios *cooked) {
  struct termios t;
  if (tcgetattr(fd, &t) != 0) return -1;
  *cooked = t;
  t.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
  t.c_cflag |= CS8;
  t.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
  t.c_cc[VMIN] = 1;
  t.c_cc[VTIME] = 0;
  return tcsetattr(fd, TCSANOW, &t);
}

/* The subordinate side of `master`, opened without becoming the worker's controlling terminal, close-on-exec. */
static int open_peer(int master) {
#ifdef TIOCGPTPEER
  int peer = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (peer >= 0 || (errno != EINVAL && errno != ENOTTY)) return peer; /* before Linux 4.13: by its name */
#endif
  char name[128];
#if defined(__linux__) || defined(__APPLE__)
  if (ptsname_r(master, name, sizeof name) != 0) return -1;
#else
  const char *p = ptsname(master);
  if (p == NULL || strlen(p) >= sizeof name) return -1;
  strcpy(name, p);
#endif
  int fd = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fd >= 0 && !cloexec(fd)) {
    close(fd);
    return -1;
  }
  return fd;
}

bool terminal_open(struct job *job, unsigned cols, unsigned rows, bool raw, int fds[2]) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) return false;
  int fd = -1;
  if (!cloexec(master) || grantpt(master) != 0 || unlockpt(master) != 0 || set_size(master, cols, rows) != 0) goto fail;
  fd = open_peer(master);
  if (fd < 0) goto fail;
  if (raw) {
    if (set_raw(master, &job->cooked) != 0) goto fail;
    job->raw = true;
  }
  job->terminal = true;
  fds[0] = master;
  fds[1] = fd;
  return true;
fail:;
  int saved = errno;
  if (fd >= 0) close(fd);
  close(master);
  errno = saved;
  return false;
}

/* The controlling side, through whichever of the job's descriptors of it is still open; -1 once both are closed. */
static int controlling_side(const struct job *job) {
  if (job->w_out[1].fd >= 0) return job->w_out[1].fd;
  return job->w_stdin.fd;
}

bool terminal_control(struct job *job, const uint8_t *payload, size_t len) {
  bool resize = len == 5 && payload[0] == TERMINAL_RESIZE, raw = len == 2 && payload[0] == TERMINAL_RAW;
  if (!resize && !raw) return false;
  unsigned cols = 0, rows = 0;
  if (resize) {
    cols = (unsigned)payload[1] << 8 | payload[2];
    rows = (unsigned)payload[3] << 8 | payload[4];
    if (cols == 0 || rows == 0) return false;
  } else if (payload[1] > 1) {
    return false;
  }
  int fd = controlling_side(job);
  if (!job->terminal || fd < 0) return true; /* a command without a terminal, or one that hung up: nothing to do */
  if (resize) {
    (void)set_size(fd, cols, rows); /* EIO: the terminal hung up */
  } else if ((payload[1] == 1) != job->raw) {
    if (payload[1] == 1) job->raw = set_raw(fd, &job->cooked) == 0;
    else job->raw = tcsetattr(fd, TCSANOW, &job->cooked) != 0;
  }
  return true;
}
