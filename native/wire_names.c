/* Signals and errno names: the names travel on the wire. */
#include "worker.h"

#include <errno.h>
#include <string.h>

struct named {
  const char *name;
  int value;
};

static const struct named SIGNALS[] = {
  {"SIGHUP", SIGHUP}, {"SIGINT", SIGINT}, {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL}, {"SIGTRAP", SIGTRAP},
  {"SIGABRT", SIGABRT}, {"SIGBUS", SIGBUS}, {"SIGFPE", SIGFPE}, {"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1},
  {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2}, {"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
#ifdef SIGSTKFLT
  {"SIGSTKFLT", SIGSTKFLT},
#endif
  {"SIGCHLD", SIGCHLD}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP}, {"SIGTSTP", SIGTSTP}, {"SIGTTIN", SIGTTIN},
  {"SIGTTOU", SIGTTOU}, {"SIGURG", SIGURG}, {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ}, {"SIGVTALRM", SIGVTALRM},
  {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},
#ifdef SIGIO
  {"SIGIO", SIGIO},
#endif
#ifdef SIGPWR
  {"SIGPWR", SIGPWR},
#endif
  {"SIGSYS", SIGSYS},
#ifdef SIGIOT
  {"SIGIOT", SIGIOT},
#endif
#ifdef SIGPOLL
  {"SIGPOLL", SIGPOLL},
#endif
#ifdef SIGINFO
  {"SIGINFO", SIGINFO},
#endif
};

/* The number of a signal name, or 0 when unknown (a kill with an unknown name is ignored, as in serve.ts). */
int signal_number(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++) {
    if (strlen(SIGNALS[i].name) == len && memcmp(SIGNALS[i].name, name, len) == 0) return SIGNALS[i].value;
  }
  return 0;
}

const char *signal_name(int sig) {
  for (size_t i = 0; i < sizeof SIGNALS / sizeof SIGNALS[0]; i++) {
    if (SIGNALS[i].value == sig) return SIGNALS[i].name;
  }
  return NULL;
}

#define ERRNO(e) {#e, e}
static const struct named ERRNOS[] = {
  ERRNO(E2BIG), ERRNO(EACCES), ERRNO(EAGAIN), ERRNO(EBADF), ERRNO(EBUSY), ERRNO(EEXIST), ERRNO(EFAULT),
  ERRNO(EINVAL), ERRNO(EIO), ERRNO(EISDIR), ERRNO(ELOOP), ERRNO(EMFILE), ERRNO(ENAMETOOLONG), ERRNO(ENFILE),
  ERRNO(ENODEV), ERRNO(ENOENT), ERRNO(ENOEXEC), ERRNO(ENOMEM), ERRNO(ENOSPC), ERRNO(ENOSYS), ERRNO(ENOTDIR),
  ERRNO(ENOTSUP), ERRNO(ENXIO), ERRNO(EPERM), ERRNO(EROFS), ERRNO(ESRCH), ERRNO(ETXTBSY),
#ifdef ELIBBAD
  ERRNO(ELIBBAD),
#endif
};

const char *errno_name(int err) {
  for (size_t i = 0; i < sizeof ERRNOS / sizeof ERRNOS[0]; i++) {
    if (ERRNOS[i].value == err) return ERRNOS[i].name;
  }
  return "EUNKNOWN";
}
