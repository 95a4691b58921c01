#include "rssm.h"

#define RSSM_STR2(x) #x
#define RSSM_STR(x) RSSM_STR2(x)

const char *rssm_version_string(void)
{
    return RSSM_STR(RSSM_VERSION_MAJOR) "." RSSM_STR(RSSM_VERSION_MINOR) "." RSSM_STR(RSSM_VERSION_PATCH);
}
