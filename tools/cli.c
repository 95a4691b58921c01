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

int cli_u32_list(const char *cmd, const char *opt, const char *s, uint32_t *out, size_t max, size_t *n)
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
        if (!cli_u32(cmd, opt, tok, &out[*n]))
            return 0;
        ++*n;
    }
    if (*n == 0) {
        fprintf(stderr, "rssm %s: %s: empty list\n", cmd, opt);
        return 0;
    }
    return 1;
}

int cli_unknown(const char *cmd, const char *arg)
{
    fprintf(stderr, "rssm %s: unknown option '%s' (see rssm %s --help)\n", cmd, arg, cmd);
    return CLI_USAGE;
}
