/* Test plugin: a descriptor as a plugin built for ABI 1.0 has it, which
 * ends at run. The host must load it and must not read the choices
 * member that ABI 1.1 added after run (the memory there is not the
 * plugin's descriptor). */
#include <dagrun/plugin.h>

static const dagrun_param_spec params[] = {
    {"mode", DAGRUN_PARAM_STRING, "fast", 0, "any string, as in ABI 1.0"},
    {NULL, 0, NULL, 0, NULL},
};

static int run(dagrun_ctx *ctx, const dagrun_host *host) { return 0; }

/* dagrun_stage of ABI 1.0, member for member. */
typedef struct stage_1_0 {
  uint32_t struct_size;
  uint32_t abi_version;
  const char *name, *version, *summary;
  const dagrun_param_spec *params;
  int (*run)(dagrun_ctx *ctx, const dagrun_host *host);
} stage_1_0;

/* Followed by a pointer a careless host would take for choices. */
static const struct {
  stage_1_0 stage;
  const void *not_choices;
} desc = {{sizeof(stage_1_0), (1u << 16) | 0u, "abi_1_0", "1.0",
           "Built for ABI 1.0 (tests)", params, run},
          (const void *)&desc};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) {
  return (const dagrun_stage *)(const void *)&desc.stage;
}
