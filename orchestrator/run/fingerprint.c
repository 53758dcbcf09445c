/*
 * fingerprint: canonical JSON of what a task depends on, hashed.
 */
#include "fingerprint.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "lib/sha256.h"

/* Sorts the keys of every object in j, at every depth, in place (strcmp
 * order, stable for equal keys): the canonical order of the JSON that is
 * hashed. */
static void sort_keys(cJSON *j) {
  if (!j)
    return;
  for (cJSON *c = j->child; c; c = c->next)
    sort_keys(c);
  if (!cJSON_IsObject(j))
    return;
  /* Insertion sort of the child list: objects here are small. */
  cJSON *sorted = NULL;
  while (j->child) {
    cJSON *c = j->child;
    j->child = c->next;
    cJSON **pp = &sorted;
    while (*pp && strcmp((*pp)->string, c->string) <= 0)
      pp = &(*pp)->next;
    c->next = *pp;
    *pp = c;
  }
  /* Relinks prev: cJSON keeps the head's prev pointing at the tail. */
  cJSON *prev = NULL;
  for (cJSON *c = sorted; c; c = c->next) {
    c->prev = prev;
    prev = c;
  }
  if (sorted)
    sorted->prev = prev;
  j->child = sorted;
}

static cJSON *copy_or_empty(const cJSON *j) {
  return j ? cJSON_Duplicate(j, 1) : cJSON_CreateObject();
}

char *fingerprint_compute(const fingerprint_input *in) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "v", 1);
  cJSON_AddStringToObject(j, "stage", in->stage);
  if (in->version)
    cJSON_AddStringToObject(j, "version", in->version);
  else
    cJSON_AddNullToObject(j, "version");
  cJSON_AddItemToObject(j, "params", copy_or_empty(in->params));
  cJSON_AddItemToObject(j, "env", copy_or_empty(in->env));
  if (in->world_size > 1)
    cJSON_AddNumberToObject(j, "world_size", in->world_size);
  if (in->has_interval) {
    cJSON *iv = cJSON_AddArrayToObject(j, "interval");
    cJSON_AddItemToArray(iv, cJSON_CreateNumber(in->interval_start));
    cJSON_AddItemToArray(iv, cJSON_CreateNumber(in->interval_end));
  }
  if (in->ran_in)
    cJSON_AddStringToObject(j, "ran_in", in->ran_in);
  cJSON *ups = cJSON_AddArrayToObject(j, "upstream");
  for (size_t k = 0; k < in->n_up; k++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", in->up[k].name);
    cJSON_AddStringToObject(e, "fingerprint", in->up[k].fingerprint);
    cJSON_AddItemToObject(e, "outputs", copy_or_empty(in->up[k].outputs));
    cJSON_AddItemToArray(ups, e);
  }
  sort_keys(j);
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  char *hex = text ? sha256_hex(text, strlen(text)) : NULL;
  cJSON_free(text);
  return hex;
}

char *fingerprint_task_dir(const char *task) {
  return xasprintf("${dagrun:task-dir:%s}", task);
}
