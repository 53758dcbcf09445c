/* Test plugin: its param's default is not among the param's choices, a
 * bug the loader must refuse rather than pass to every task. */
#include <dagrun/plugin.h>

static const dagrun_param_spec params[] = {
    {"device", DAGRUN_PARAM_STRING, "gpu", 0, "where to run"},
    {NULL, 0, NULL, 0, NULL},
};

static const char *const devices[] = {"cpu", "cuda", "auto", NULL};
static const dagrun_param_choice choices[] = {{"device", devices},
                                              {NULL, NULL}};

static int run(dagrun_ctx *ctx, const dagrun_host *host) { return 0; }

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "bad_choice_default",
                                   "1.0",
                                   "A default outside its choices (tests)",
                                   params,
                                   run,
                                   choices,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
