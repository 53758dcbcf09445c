/* Token shard files: what a writer writes, a reader reads back; truncated,
 * corrupted and foreign files are refused with a message that says why. */
#include "data/tokfile.h"
#include "testlib.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static void flip_byte(const char *path, off_t at) {
  int fd = open(path, O_RDWR);
  unsigned char c;
  CHECK(pread(fd, &c, 1, at) == 1);
  c ^= 0x5a;
  CHECK(pwrite(fd, &c, 1, at) == 1);
  close(fd);
}

static void test_round_trip_uint16(void) {
  char err[512] = "";
  tokfile_writer *w = NULL;
  const char *p = test_path("a.tok");
  CHECK_INT(tokfile_writer_create(p, 4096, 4095, &w, err, sizeof err), 0);
  uint32_t doc1[] = {1, 2, 3}, doc2[] = {4000, 0};
  CHECK_INT(tokfile_writer_add_doc(w, doc1, 3, err, sizeof err), 0);
  CHECK_INT(tokfile_writer_add_doc(w, doc2, 2, err, sizeof err), 0);
  CHECK_INT(tokfile_writer_add_doc(w, NULL, 0, err, sizeof err), 0);
  tokfile_info info;
  CHECK_INT(tokfile_writer_finish(w, &info, err, sizeof err), 0);
  CHECK(access(test_path("a.tok.tmp"), F_OK) != 0);
  struct stat st;
  CHECK_INT(stat(p, &st), 0);
  /* 3 documents, each led by the end-of-text id: 3 + 5 tokens. */
  CHECK_INT(st.st_size, 128 + 8 * 2);

  tokfile *f = NULL;
  CHECK_INT(tokfile_open(p, &f, err, sizeof err), 0);
  if (!f)
    return;
  const tokfile_info *h = tokfile_header(f);
  CHECK_INT(h->token_bytes, 2);
  CHECK_INT(h->vocab_size, 4096);
  CHECK_INT(h->n_tokens, 8);
  CHECK_INT(h->n_docs, 3);
  CHECK_INT(h->eot_id, 4095);
  CHECK(memcmp(h->sha256, info.sha256, 32) == 0);
  uint32_t want[] = {4095, 1, 2, 3, 4095, 4000, 0, 4095};
  for (int i = 0; i < 8; i++)
    CHECK_INT(tokfile_get(tokfile_tokens(f), h->token_bytes, i), want[i]);
  CHECK_INT(tokfile_verify(f, err, sizeof err), 0);
  tokfile_close(f);

  /* One flipped bit in the tokens: the checksum catches it. */
  flip_byte(p, 130);
  CHECK_INT(tokfile_open(p, &f, err, sizeof err), 0);
  CHECK_INT(tokfile_verify(f, err, sizeof err), -1);
  CHECK(strstr(err, "checksum mismatch") != NULL);
  tokfile_close(f);

  /* Truncated: refused at open, saying so. */
  CHECK_INT(truncate(p, 128 + 7), 0);
  CHECK_INT(tokfile_open(p, &f, err, sizeof err), -1);
  CHECK(strstr(err, "truncated") != NULL);
  CHECK(f == NULL);
}

static void test_wide_vocab_uses_uint32(void) {
  char err[512] = "";
  tokfile_writer *w = NULL;
  const char *p = test_path("wide.tok");
  CHECK_INT(tokfile_writer_create(p, 100000, TOKFILE_NO_EOT, &w, err,
                                  sizeof err), 0);
  uint32_t doc[] = {99999, 65536, 7};
  CHECK_INT(tokfile_writer_add_doc(w, doc, 3, err, sizeof err), 0);
  CHECK_INT(tokfile_writer_finish(w, NULL, err, sizeof err), 0);
  tokfile *f = NULL;
  CHECK_INT(tokfile_open(p, &f, err, sizeof err), 0);
  if (!f)
    return;
  CHECK_INT(tokfile_header(f)->token_bytes, 4);
  CHECK_INT(tokfile_header(f)->n_tokens, 3);
  CHECK_INT(tokfile_get(tokfile_tokens(f), 4, 0), 99999);
  CHECK_INT(tokfile_get(tokfile_tokens(f), 4, 1), 65536);
  CHECK_INT(tokfile_verify(f, err, sizeof err), 0);
  tokfile_close(f);
}

static void test_bad_ids_and_files(void) {
  char err[512] = "";
  tokfile_writer *w = NULL;
  const char *p = test_path("bad.tok");
  /* An id outside the vocabulary is refused; abort leaves nothing. */
  CHECK_INT(tokfile_writer_create(p, 10, 9, &w, err, sizeof err), 0);
  uint32_t doc[] = {3, 10};
  CHECK_INT(tokfile_writer_add_doc(w, doc, 2, err, sizeof err), -1);
  CHECK(strstr(err, "token id 10 outside the vocabulary") != NULL);
  tokfile_writer_abort(w);
  CHECK(access(p, F_OK) != 0);
  CHECK(access(test_path("bad.tok.tmp"), F_OK) != 0);
  CHECK_INT(tokfile_writer_create(p, 10, 10, &w, err, sizeof err), -1);
  CHECK(w == NULL);

  /* A file that is not a token file, or of a newer version. */
  tokfile *f = NULL;
  const char *q = test_path("text.tok");
  FILE *fp = fopen(q, "w");
  for (int i = 0; i < 200; i++)
    fputc('x', fp);
  fclose(fp);
  CHECK_INT(tokfile_open(q, &f, err, sizeof err), -1);
  CHECK(strstr(err, "bad magic") != NULL);

  CHECK_INT(tokfile_writer_create(p, 10, 9, &w, err, sizeof err), 0);
  CHECK_INT(tokfile_writer_finish(w, NULL, err, sizeof err), 0);
  flip_byte(p, 8); /* version */
  CHECK_INT(tokfile_open(p, &f, err, sizeof err), -1);
  CHECK(strstr(err, "version") != NULL);

  CHECK_INT(tokfile_open(test_path("missing.tok"), &f, err, sizeof err), -1);
  CHECK(strstr(err, "No such file") != NULL);
  CHECK_INT(tokfile_writer_create("/nonexistent-dir/x.tok", 10, 9, &w, err,
                                  sizeof err), -1);
  CHECK(strstr(err, "/nonexistent-dir/x.tok.tmp") != NULL);
}

int main(void) {
  if (test_tmpdir_make("tokfile") != 0)
    return 1;
  test_round_trip_uint16();
  test_wide_vocab_uses_uint32();
  test_bad_ids_and_files();
  test_tmpdir_remove();
  TEST_DONE();
}
