/* rssm: the command-line tool's entry point. Subcommands live in cmd_*.c,
 * the option parser they share in cli.c. */
#include "cli.h"

#include "rssm.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rssm <command> [options]\n"
            "\n"
            "ReplaySSM decode for Gated DeltaNet and Kimi Delta Attention on CPU, Vulkan and CUDA.\n"
            "\n"
            "commands:\n"
            "  info      backends built in, their devices and features\n"
            "  conform   check every backend against the float64 oracle (seeded or .npy traces)\n"
            "  bench     time replay and packed decode, with GB/s and the replay/packed ratio\n"
            "\n"
            "Run 'rssm <command> --help' for a command's options; 'rssm --version' prints the\n"
            "version. Exit status: 0 on success, 1 when a check or a run failed, 2 on a usage\n"
            "error.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        printf("rssm %s\n", rssm_version_string());
        return 0;
    }
    if (strcmp(cmd, "info") == 0)
        return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "conform") == 0)
        return cmd_conform(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "rssm: unknown command '%s' (commands: info, conform, bench; see rssm --help)\n", cmd);
    return CLI_USAGE;
}
