/* The option parser every `rssm` subcommand uses (cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_flag(const char *arg, const char *name) { return strcmp(arg, name) == 0; }

int cli_value(const char *cmd, int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "rssm %s: option %s needs a value\n", cmd, name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int cli_u64(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end != '\0' || errno) {
        fprintf(stderr, "rssm %s: %s: '%s' is not a non-negative integer\n", cmd, opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_u32(const char *cmd, const char *opt, const char *s, uint32_t *out)
{
    uint64_t v;
    if (!cli_u64(cmd, opt, s, &v))
        return 0;
    if (v > UINT32_MAX) {
        fprintf(stderr, "rssm %s: %s: %s is too large\n", cmd, opt, s);
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

int cli_double(const char *cmd, const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno) {
        fprintf(stderr, "rssm %s: %s: '%s' is not a number\n", cmd, opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

/* Splits `s` at commas and hands the i-th value to item(i) (i < max); *n
 * is the count. Every list option's messages come from here. */
typedef int (*cli_item_fn)(const char *cmd, const char *opt, const char *tok, size_t i, const void *ctx);
static int cli_list(const char *cmd, const char *opt, const char *s, size_t max, size_t *n, cli_item_fn item,
                    const void *ctx)
{
    *n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "rssm %s: %s: list too long\n", cmd, opt);
        return 0;
    }
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == max) {
            fprintf(stderr, "rssm %s: %s: at most %zu values\n", cmd, opt, max);
            return 0;
        }
        if (!item(cmd, opt, tok, *n, ctx))
            return 0;
        ++*n;
    }
    if (*n == 0) {
        fprintf(stderr, "rssm %s: %s: empty list\n", cmd, opt);
        return 0;
    }
    return 1;
}

typedef struct u32_out {
    uint32_t *out;
} u32_out;

static int u32_item(const char *cmd, const char *opt, const char *tok, size_t i, const void *ctx)
{
    return cli_u32(cmd, opt, tok, &((const u32_out *)ctx)->out[i]);
}

int cli_u32_list(const char *cmd, const char *opt, const char *s, uint32_t *out, size_t max, size_t *n)
{
    const u32_out o = {out};
    return cli_list(cmd, opt, s, max, n, u32_item, &o);
}

typedef struct word_out {
    const char *const *words;
    size_t nw;
    int *out;
} word_out;

static int word_item(const char *cmd, const char *opt, const char *tok, size_t i, const void *ctx)
{
    const word_out *o = ctx;
    for (size_t w = 0; w < o->nw; w++)
        if (strcmp(tok, o->words[w]) == 0) {
            o->out[i] = (int)w;
            return 1;
        }
    fprintf(stderr, "rssm %s: %s: unknown value '%s'\n", cmd, opt, tok);
    return 0;
}

int cli_word_list(const char *cmd, const char *opt, const char *s, const char *const *words, size_t nw, int *out,
                  size_t *n)
{
    const word_out o = {words, nw, out};
    return cli_list(cmd, opt, s, nw, n, word_item, &o);
}

int cli_unknown(const char *cmd, const char *arg)
{
    fprintf(stderr, "rssm %s: unknown option '%s' (see rssm %s --help)\n", cmd, arg, cmd);
    return CLI_USAGE;
}
