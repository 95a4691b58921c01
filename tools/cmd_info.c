/* rssm info: which backends were built in, and what each finds here. */
#include "cli.h"

#include "rssm.h"

#include <stdio.h>
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
           "  --started   print only the names of the backends that start, one per line\n"
           "              (for scripts: for b in $(rssm info --started); do ...)\n");
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
    if (started_only) {
        for (size_t i = 0; i < rssm_backend_name_count(); i++) {
            rssm_backend *b = NULL;
            if (rssm_backend_create(rssm_backend_name_at(i), &b, NULL) == RSSM_OK)
                printf("%s\n", rssm_backend_name_at(i));
            rssm_backend_destroy(&b);
        }
        return 0;
    }
    printf("rssm backends built in: %zu\n", rssm_backend_name_count());
    int any = 0;
    for (size_t i = 0; i < rssm_backend_name_count(); i++) {
        const char *name = rssm_backend_name_at(i);
        rssm_backend *b = NULL;
        rssm_error err;
        rssm_status st = rssm_backend_create(name, &b, &err);
        if (st != RSSM_OK) {
            printf("\n%s: not available (%s: %s)\n", name, rssm_status_str(st), err.message);
            continue;
        }
        any = 1;
        printf("\n%s: available\n  device: %s\n", rssm_backend_name(b), rssm_backend_device(b));
        char buf[4096];
        if (rssm_backend_describe(b, buf, sizeof buf, &err) == RSSM_OK)
            print_indented(buf);
        else
            printf("    (describe failed: %s)\n", err.message);
        rssm_backend_destroy(&b);
    }
    if (!any)
        printf("\nno backend could start\n");
    return 0;
}
