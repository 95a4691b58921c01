/* The `rssm` subcommands and the small option parser they share. Every
 * subcommand answers --help; a bad or unknown option prints what was wrong
 * and returns CLI_USAGE (exit code 2). */
#ifndef RSSM_CLI_H
#define RSSM_CLI_H

#include <stddef.h>
#include <stdint.h>

#define CLI_USAGE 2

int cmd_info(int argc, char **argv);
int cmd_conform(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* If argv[*i] is option `name` ("--seed"), given as "--seed N" or
 * "--seed=N", sets *value, advances *i past a separate value and returns 1.
 * Returns 0 if it is another option, -1 (after printing why) if the value
 * is missing. */
int cli_value(const char *cmd, int argc, char **argv, int *i, const char *name, const char **value);

/* 1 if arg is exactly the flag `name`. */
int cli_flag(const char *arg, const char *name);

/* Parse a number for option `opt`; print why and return 0 on failure. */
int cli_u32(const char *cmd, const char *opt, const char *s, uint32_t *out);
int cli_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
int cli_double(const char *cmd, const char *opt, const char *s, double *out);
/* "1,16,64": up to max values, at least one. */
int cli_u32_list(const char *cmd, const char *opt, const char *s, uint32_t *out, size_t max, size_t *n);
/* "a,b" over the vocabulary words[0..nw-1], at most nw values: out[i] is the
 * index of the i-th. 0 (with a message) on an unknown or missing value. */
int cli_word_list(const char *cmd, const char *opt, const char *s, const char *const *words, size_t nw, int *out,
                  size_t *n);

/* Prints "rssm CMD: unknown option 'ARG' (see rssm CMD --help)"; returns CLI_USAGE. */
int cli_unknown(const char *cmd, const char *arg);

#endif
