/* rssm info: which backends were built in, and what each finds here. */
#include "cli.h"

#include "conform.h"

#include "rssm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf("usage: rssm info [--started]\n"
           "\n"
           "Lists the backends built into this rssm, in order of preference. For each, tries\n"
           "to start it and prints its device and features, or why it could not start.\n"
           "A backend listed as built in may still find no device on this machine.\n"
           "\n"
           "options:\n"
           "  --started   print only the names of the backends that start, one per line,\n"
           "              leaving out a name that runs the same kernels as an earlier one\n"
           "              on the same device (for scripts: for b in $(rssm info --started))\n");
}

/* Prints `text` with every line indented. */
static void print_indented(const char *text)
{
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        printf("    %.*s\n", n, p);
        p += n + (nl ? 1 : 0);
    }
}

int cmd_info(int argc, char **argv)
{
    int started_only = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_flag(argv[i], "--help") || cli_flag(argv[i], "-h")) {
            help();
            return 0;
        }
        if (cli_flag(argv[i], "--started")) {
            started_only = 1;
            continue;
        }
        return cli_unknown("info", argv[i]);
    }
    /* Every name built in, started once; a name whose kernels an earlier
     * one on the same device already runs is an alias of it. */
    size_t n = rssm_backend_name_count();
    rssm_backend **bs = calloc(n ? n : 1, sizeof *bs);
    rssm_error *errs = calloc(n ? n : 1, sizeof *errs);
    rssm_status *sts = calloc(n ? n : 1, sizeof *sts);
    if (!bs || !errs || !sts) {
        fprintf(stderr, "rssm info: out of memory\n");
        free(bs);
        free(errs);
        free(sts);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        sts[i] = rssm_backend_create(rssm_backend_name_at(i), &bs[i], &errs[i]);
    if (!started_only)
        printf("rssm %s, backends built in: %zu\n", rssm_version_string(), n);
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = rssm_backend_name_at(i);
        if (sts[i] != RSSM_OK) {
            if (!started_only)
                printf("\n%s: not available (%s: %s)\n", name, rssm_status_str(sts[i]), errs[i].message);
            continue;
        }
        const char *alias = NULL;
        for (size_t j = 0; j < i && !alias; j++)
            if (rh_same_kernels(bs[j], bs[i]))
                alias = rssm_backend_name_at(j);
        if (started_only) {
            if (!alias)
                printf("%s\n", name);
            continue;
        }
        any = 1;
        printf("\n%s: available", name);
        if (alias)
            printf(" (runs the kernels of %s on this device)", alias);
        printf("\n  device: %s\n", rssm_backend_device(bs[i]));
        char buf[4096];
        rssm_error err;
        if (rssm_backend_describe(bs[i], buf, sizeof buf, &err) == RSSM_OK)
            print_indented(buf);
        else
            printf("    (describe failed: %s)\n", err.message);
    }
    for (size_t i = 0; i < n; i++)
        rssm_backend_destroy(&bs[i]);
    free(bs);
    free(errs);
    free(sts);
    if (started_only)
        return 0;
    if (!any)
        printf("\nno backend could start\n");
    return 0;
}
