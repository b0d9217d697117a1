/*
 * What a command runs with: its argv, its environment, merged from the worker's and the request's, and its program's
 * path.
 */
#include "worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"

extern char **environ;

static size_t name_hash(const char *name, size_t len) {
  uint64_t h = 14695981039346656037u; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)name[i]) * 1099511628211u;
  return (size_t)h;
}

void env_init(struct env_builder *env, size_t room) {
  size_t slots = 16;
  while (slots < 2 * room) slots *= 2;
  env->entries = xrealloc(NULL, (room + 1) * sizeof *env->entries);
  env->name_lens = xrealloc(NULL, (room + 1) * sizeof *env->name_lens);
  env->table = xrealloc(NULL, slots * sizeof *env->table);
  memset(env->table, 0, slots * sizeof *env->table);
  env->mask = slots - 1;
  env->count = 0;
}

/* Adds `entry` ("NAME=value", NAME `name_len` bytes), or with `replace`, replaces the entry of the same name. */
void env_put(struct env_builder *env, char *entry, size_t name_len, bool replace) {
  size_t slot = name_hash(entry, name_len) & env->mask;
  for (; env->table[slot] != 0; slot = (slot + 1) & env->mask) {
    size_t k = env->table[slot] - 1;
    if (env->name_lens[k] == name_len && memcmp(env->entries[k], entry, name_len) == 0) {
      if (replace) env->entries[k] = entry; /* a later value of the same name replaces the earlier one */
      return;
    }
  }
  env->table[slot] = env->count + 1;
  env->name_lens[env->count] = name_len;
  env->entries[env->count++] = entry;
}

/* The value of NAME in a NULL-terminated environment, or NULL. */
static const char *env_lookup(char *const *envp, const char *name) {
  size_t len = strlen(name);
  for (; *envp != NULL; envp++) {
    if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=') return *envp + len + 1;
  }
  return NULL;
}

/*
 * The program to execute: `cmd` itself when it names a path, else the first executable `cmd` in the command's
 * own PATH (as Node and the other workers look it up), or an error: EACCES when one was found but none can be
 * executed, ENOENT otherwise. A relative PATH entry (an empty one is ".") is relative to the command's `cwd` when
 * it has one, as the command runs there: it is looked for there, and returned as is, for the command's exec.
 */
char *resolve_program(const char *cmd, char *const *envp, const char *cwd, int *err) {
  if (cmd[0] == '\0') {
    *err = ENOENT;
    return NULL;
  }
  if (strchr(cmd, '/') != NULL) return strdup(cmd);
  const char *path = env_lookup(envp, "PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  size_t cmd_len = strlen(cmd);
  size_t cwd_len = cwd != NULL ? strlen(cwd) : 0;
  *err = ENOENT;
  for (const char *p = path;; p++) {
    const char *colon = strchr(p, ':');
    size_t dir_len = colon ? (size_t)(colon - p) : strlen(p);
    bool relative = dir_len == 0 || p[0] != '/';
    /* `cwd/` ahead of the candidate when it is relative: what the worker stats; the command gets the rest. */
    size_t prefix = relative && cwd_len > 0 ? cwd_len + 1 : 0;
    char *joined = xrealloc(NULL, prefix + dir_len + cmd_len + 3);
    if (prefix) {
      memcpy(joined, cwd, cwd_len);
      joined[cwd_len] = '/';
    }
    char *candidate = joined + prefix;
    if (dir_len == 0) {
      memcpy(candidate, "./", 2);
      dir_len = 2;
    } else {
      memcpy(candidate, p, dir_len);
      if (candidate[dir_len - 1] != '/') candidate[dir_len++] = '/';
    }
    memcpy(candidate + dir_len, cmd, cmd_len + 1);
    struct stat st;
    if (stat(joined, &st) == 0 && !S_ISDIR(st.st_mode)) {
      if (access(joined, X_OK) == 0) {
        if (prefix) memmove(joined, candidate, dir_len + cmd_len + 1);
        return joined;
      }
      *err = EACCES;
    }
    free(joined);
    if (colon == NULL) break;
    p = colon;
  }
  return NULL;
}

/*
 * A request's argv (argv0, else cmd, then args) and environment (the worker's unless clearEnv, the request's env over
 * it), as execve takes them; `has_nul` says whether cmd, argv0, an argument or an env name or value holds a NUL.
 */
void command_line_build(struct command_line *line, const struct json_doc *doc) {
  const struct json_node *root = &doc->nodes[0];
  const struct json_node *cmd = json_get(doc, root, "cmd");
  const struct json_node *args = json_get(doc, root, "args");
  const struct json_node *env = json_get(doc, root, "env");
  const struct json_node *argv0 = json_get(doc, root, "argv0");
  const struct json_node *clear = json_get(doc, root, "clearEnv");
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
  line->argc = argc;
  line->argv = xrealloc(NULL, (argc + 2) * sizeof *line->argv);
  env_init(&line->env, inherited + envc);
  line->owned = xrealloc(NULL, (envc + 1) * sizeof *line->owned);
  line->owned_count = 0;

  bool nul = cmd->has_nul || (argv0 && argv0->has_nul);
  size_t i = 0;
  line->argv[i++] = (char *)json_str(doc, argv0 ? argv0 : cmd);
  for (const struct json_node *a = json_first(doc, args); a; a = json_next(doc, a)) {
    nul = nul || a->has_nul;
    line->argv[i++] = (char *)json_str(doc, a);
  }
  line->argv[i] = NULL;
  for (size_t k = 0; k < inherited; k++) {
    const char *eq = strchr(environ[k], '=');
    /* Of an inherited name set twice, the first counts (getenv's). */
    env_put(&line->env, environ[k], eq ? (size_t)(eq - environ[k]) : strlen(environ[k]), false);
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
      line->owned[line->owned_count++] = entry;
      env_put(&line->env, entry, key_len, true);
    }
  }
  line->env.entries[line->env.count] = NULL;
  line->envp = line->env.entries;
  line->has_nul = nul;
}

void command_line_free(struct command_line *line) {
  for (size_t k = 0; k < line->owned_count; k++) free(line->owned[k]);
  free(line->owned);
  free(line->argv);
  free(line->env.entries);
  free(line->env.name_lens);
  free(line->env.table);
}
