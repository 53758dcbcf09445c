/*
 * stagekit_param_choice: the built-in stages' own check of a param with
 * choices, behind dagrun's. It is reached only when a value got past the
 * host, so it is driven here through a fake host table.
 */
#include "common/stagekit.h"
#include "testlib.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The fake host's one param and what fail() was told. */
static const char *param_name;
static const char *str_value; /* NULL: the param is an int */
static int64_t int_value;
static char failed[512];

static int fake_string(dagrun_ctx *ctx, const char *name, const char **out) {
  (void)ctx;
  if (strcmp(name, param_name) != 0 || !str_value)
    return -1;
  *out = str_value;
  return 0;
}
static int fake_int(dagrun_ctx *ctx, const char *name, int64_t *out) {
  (void)ctx;
  if (strcmp(name, param_name) != 0 || str_value)
    return -1;
  *out = int_value;
  return 0;
}
static void fake_fail(dagrun_ctx *ctx, const char *fmt, ...) {
  (void)ctx;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(failed, sizeof failed, fmt, ap);
  va_end(ap);
}

static const dagrun_host host = {.struct_size = sizeof(dagrun_host),
                                 .abi_version = DAGRUN_ABI_VERSION,
                                 .param_string = fake_string,
                                 .param_int = fake_int,
                                 .fail = fake_fail};

static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
static const char *const stages[] = {"0", "1", "2", "3", NULL};

int main(void) {
  int k = -1;
  param_name = "device";
  str_value = "cuda";
  failed[0] = '\0';
  CHECK_INT(stagekit_param_choice(NULL, &host, "device", devices, &k), 0);
  CHECK_INT(k, 2);
  CHECK_STR(failed, "");

  str_value = "gpu";
  CHECK_INT(stagekit_param_choice(NULL, &host, "device", devices, &k), -1);
  CHECK_STR(failed, "device must be one of auto, cpu, cuda, not 'gpu'");

  /* An INT param, by its decimal text: the index is the ZeRO stage. */
  param_name = "zero_stage";
  str_value = NULL;
  int_value = 3;
  failed[0] = '\0';
  CHECK_INT(stagekit_param_choice(NULL, &host, "zero_stage", stages, &k), 0);
  CHECK_INT(k, 3);
  int_value = 4;
  CHECK_INT(stagekit_param_choice(NULL, &host, "zero_stage", stages, &k), -1);
  CHECK_STR(failed, "zero_stage must be one of 0, 1, 2, 3, not '4'");
  TEST_DONE();
}
