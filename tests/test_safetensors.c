/* tests/test_safetensors.c - worker/ckpt/safetensors.c: round trips are exact;
 * every rule of the format as the reference implementation (Hugging Face's
 * `safetensors` crate) enforces it refuses a hand-made file that breaks it,
 * with a message naming the file and the tensor, never a crash or a hang
 * (a directory or a FIFO given as the file included); and writing replaces
 * the file atomically through lib/file.h, so that a failed or killed writer
 * leaves the old file whole and a temporary that file_check_output removes.
 * (The model's weights by timm name: tests/test_model_io.c.) */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file.h"
#include "safetensors.h"

static char dir[64], path[128];

static void mk(void)
{
    snprintf(dir, sizeof dir, "/tmp/vitjob-st-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
}

static void rm(void)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(safetensors, .init = mk, .fini = rm, .timeout = 30);

/* The file at path: 8-byte little-endian length of header, header, then n
 * data bytes (zeros when data is NULL). */
static void write_raw(const char *header, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned long long len = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(len >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < n; i++) fputc(data ? ((const unsigned char *)data)[i] : 0, f);
    cr_assert_eq(fclose(f), 0);
}

static void expect_open_error(const char *needle)
{
    st_file *f = NULL;
    char err[512] = "";
    cr_assert_eq(st_open(&f, path, err, sizeof err), -1, "opened a bad file (wanted: %s)",
                 needle);
    cr_assert_null(f);
    cr_assert(strstr(err, path) && strstr(err, needle), "wanted '%s' in: %s", needle, err);
}

static void expect_open_ok(void)
{
    st_file *f = NULL;
    char err[512] = "";
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    st_close(f);
}

/* the names in dir other than the target's */
static int other_files(char *names, size_t len)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    names[0] = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strcmp(e->d_name, "model.safetensors"))
            continue;
        snprintf(names + strlen(names), len - strlen(names), "%s ", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static void read_whole(const char *p, float *out, size_t n)
{
    st_file *f;
    char err[512];
    cr_assert_eq(st_open(&f, p, err, sizeof err), 0, "%s", err);
    const st_tensor *t = st_find(f, "w");
    cr_assert_not_null(t);
    memcpy(out, t->data, n * sizeof(float));
    st_close(f);
}

/* ---- round trip ---- */

Test(safetensors, round_trip_keeps_names_shapes_dtypes_values_and_metadata)
{
    float a[6] = {1, -2, 3.5f, 4, 5, 6};
    int64_t b[3] = {7, -8, 1LL << 40};
    st_tensor ts[3] = {{"a.weight", ST_F32, 2, {2, 3}, a}, {"labels", ST_I64, 1, {3}, b},
                       {"empty", ST_BF16, 2, {0, 5}, a}};
    const char *meta[] = {"format", "pt"};
    char err[256], others[256];
    cr_assert_eq(st_write(path, ts, 3, meta, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(other_files(others, sizeof others), 0, "left behind: %s", others);
    st_file *f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(f), 3);
    const st_tensor *ra = st_find(f, "a.weight"), *rb = st_find(f, "labels");
    cr_assert(ra && rb && st_find(f, "empty"));
    cr_assert(ra->ndim == 2 && ra->shape[0] == 2 && ra->shape[1] == 3 && ra->dtype == ST_F32);
    cr_assert(memcmp(ra->data, a, sizeof a) == 0);
    cr_assert(memcmp(rb->data, b, sizeof b) == 0);
    cr_assert_str_eq(st_meta(f, "format"), "pt");
    cr_assert_null(st_find(f, "nope"));
    st_close(f);
}

Test(safetensors, the_writer_refuses_names_the_reader_would_refuse)
{
    float a[1] = {1};
    st_tensor ts[2] = {{"x", ST_F32, 1, {1}, a}, {"x", ST_F32, 1, {1}, a}};
    char err[256];
    cr_assert_eq(st_write(path, ts, 2, NULL, 0, err, sizeof err), -1);
    cr_assert(strstr(err, path) && strstr(err, "'x'"), "%s", err);
    ts[1].name = "__metadata__";
    cr_assert_eq(st_write(path, ts, 2, NULL, 0, err, sizeof err), -1);
    cr_assert(strstr(err, "'__metadata__'"), "%s", err);
    cr_assert_eq(access(path, F_OK), -1, "a refused write created the file");
}

/* ---- what the file is, and the length prefix ---- */

Test(safetensors, a_file_shorter_than_its_length_prefix_is_refused)
{
    FILE *f = fopen(path, "wb");
    fputs("abc", f);
    fclose(f);
    expect_open_error("not a safetensors file (3 bytes");
}

Test(safetensors, a_header_length_beyond_the_file_is_refused)
{
    write_raw("{}", NULL, 0);
    FILE *f = fopen(path, "r+b");
    fputc(0xff, f); /* length 255 for a 10-byte file */
    fclose(f);
    expect_open_error("header length 255 exceeds the file (10 bytes)");
}

Test(safetensors, a_header_longer_than_the_reference_limit_is_refused_though_the_file_holds_it)
{
    /* a sparse file long enough to hold a header of 100,000,001 bytes */
    unsigned long long len = 100000001ULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(len >> (8 * i));
    cr_assert_eq(write(fd, len8, 8), 8);
    cr_assert_eq(ftruncate(fd, (off_t)(8 + len)), 0);
    close(fd);
    expect_open_error("header length 100000001 exceeds the limit of 100000000 bytes");
}

Test(safetensors, a_directory_given_as_the_file_is_refused_as_one)
{
    snprintf(path, sizeof path, "%s", dir);
    expect_open_error("is a directory, not a regular file");
}

Test(safetensors, a_fifo_given_as_the_file_is_refused_without_blocking)
{
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_open_error("is a FIFO, not a regular file");
}

/* ---- the header's text ---- */

Test(safetensors, a_header_that_is_not_valid_utf8_is_refused)
{
    /* a stray continuation byte, an overlong '/', a UTF-16 surrogate, past U+10FFFF,
     * and a sequence cut short by the header's end */
    static const char *const bad[] = {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"};
    char header[128];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(header, sizeof header,
                 "{\"x%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", bad[i]);
        write_raw(header, NULL, 4);
        expect_open_error("not valid UTF-8 at byte 3");
    }
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\xe2\x82", NULL, 4);
    expect_open_error("not valid UTF-8");
    /* while valid multi-byte names load */
    write_raw("{\"\xc3\xa9t\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"F32\",\"shape\":[1],"
              "\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_ok();
}

Test(safetensors, a_header_not_starting_with_a_brace_is_refused)
{
    write_raw(" {\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("must start with '{'");
    write_raw("[1,2]", NULL, 0);
    expect_open_error("not a JSON object");
    write_raw("", NULL, 0);
    expect_open_error("not a JSON object");
}

Test(safetensors, text_after_the_header_object_is_refused_but_trailing_spaces_are_not)
{
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}x", NULL, 4);
    expect_open_error("text follows it at byte 54");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}{}", NULL, 4);
    expect_open_error("text follows it");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", NULL, 4);
    expect_open_error("invalid JSON");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ", NULL, 4);
    expect_open_ok();
}

Test(safetensors, a_control_character_or_escaped_nul_in_a_name_is_refused)
{
    write_raw("{\"a\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("a control character inside a string at byte 3");
    /* "x\u0000y" would read as "x" */
    write_raw("{\"x\\u0000y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("an escaped NUL");
    /* an escaped backslash before u0000 is text, not a NUL */
    write_raw("{\"x\\\\u0000y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL,
              4);
    expect_open_ok();
}

/* ---- names and metadata ---- */

Test(safetensors, a_header_naming_a_tensor_twice_is_refused_naming_it)
{
    float d[2] = {1, 2};
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", d, sizeof d);
    expect_open_error("tensor 'x' is named twice in the header");
    write_raw("{\"__metadata__\":{},\"__metadata__\":{},"
              "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d, 4);
    expect_open_error("'__metadata__' is named twice");
}

Test(safetensors, metadata_must_be_an_object_whose_values_are_strings)
{
    const char *entry = "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
    char header[256];
    snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\",\"n\":1},%s}", entry);
    write_raw(header, NULL, 4);
    expect_open_error("__metadata__ value of 'n' is not a string");
    snprintf(header, sizeof header, "{\"__metadata__\":\"pt\",%s}", entry);
    write_raw(header, NULL, 4);
    expect_open_error("__metadata__ is not a JSON object");
    snprintf(header, sizeof header, "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"},%s}", entry);
    write_raw(header, NULL, 4);
    expect_open_error("__metadata__ key 'a' is given twice");
    snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\"},%s}", entry);
    write_raw(header, NULL, 4);
    expect_open_ok();
}

/* ---- each tensor's entry ---- */

Test(safetensors, an_unknown_dtype_is_refused_naming_the_tensor)
{
    write_raw("{\"w\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", NULL, 1);
    expect_open_error("tensor 'w': unsupported dtype F8");
    write_raw("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", NULL, 1);
    expect_open_error("tensor 'w': malformed header entry: dtype is not a string");
}

Test(safetensors, an_entry_missing_a_field_or_giving_one_twice_is_refused)
{
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("tensor 'w': malformed header entry: shape is not an array");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("tensor 'w': malformed header entry: no 'shape'");
    write_raw("{\"w\":{\"dtype\":\"BF16\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              NULL, 4);
    expect_open_error("tensor 'w': 'dtype' is given twice");
    write_raw("{\"w\":[1]}", NULL, 0);
    expect_open_error("tensor 'w': its entry is not a JSON object");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
              NULL, 4);
    expect_open_error("at most 8 dimensions");
}

Test(safetensors, a_tensor_whose_data_ends_past_the_data_region_is_refused_naming_it)
{
    float x[2] = {1, 2};
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", x, sizeof x);
    expect_open_error("tensor 'x': data_offsets [0, 16] end past the 8 bytes of data");
    /* a range that starts past the data too */
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", x, sizeof x);
    expect_open_error("tensor 'x': data_offsets [12, 16] end past the 8 bytes of data");
}

Test(safetensors, offsets_that_disagree_with_the_shape_are_refused)
{
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", NULL, 16);
    expect_open_error("tensor 'x': data_offsets [0, 16] hold 16 bytes, its F32 shape [3] needs 12");
    write_raw("{\"x\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", NULL, 16);
    expect_open_error("its BF16 shape [2,2] needs 8");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", NULL, 4);
    expect_open_error("tensor 'x': data_offsets [4, 0] end before they begin");
}

Test(safetensors, shapes_whose_byte_size_overflows_or_fractional_numbers_are_refused)
{
    /* 2^31 * 2^31 F32 elements are 2^64 bytes: wrapped, they would be 0 */
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],"
              "\"data_offsets\":[0,0]}}", NULL, 0);
    expect_open_error("tensor 'x': bad shape: its byte size overflows 64 bits");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
              "\"data_offsets\":[0,0]}}", NULL, 4);
    expect_open_error("tensor 'x': bad shape: dimension 0");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("bad shape");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", NULL, 4);
    expect_open_error("bad shape");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", NULL, 4);
    expect_open_error("tensor 'x': data_offsets must be two non-negative integers");
    write_raw("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", NULL, 4);
    expect_open_error("data_offsets must be two");
}

/* ---- the data region as a whole ---- */

Test(safetensors, overlapping_ranges_are_refused_naming_both_tensors)
{
    write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", NULL, 12);
    expect_open_error("tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
    /* the same range twice */
    write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", NULL, 8);
    expect_open_error("overlap tensor 'a'");
}

Test(safetensors, a_hole_between_tensors_is_refused)
{
    write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", NULL, 12);
    expect_open_error("bytes [4, 8) of the data belong to no tensor (a hole before tensor 'b')");
    write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", NULL, 8);
    expect_open_error("bytes [0, 4) of the data belong to no tensor");
}

Test(safetensors, data_after_the_last_tensor_is_refused)
{
    write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 8);
    expect_open_error("data ends at byte 4 of a 8-byte data region");
    write_raw("{}", NULL, 1);
    expect_open_error("data ends at byte 0 of a 1-byte data region");
    write_raw("{}", NULL, 0);
    expect_open_ok();
}

Test(safetensors, empty_tensors_may_share_an_offset_as_the_reference_allows)
{
    write_raw("{\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"e2\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}", NULL, 8);
    st_file *f;
    char err[512];
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_count(f), 4);
    cr_assert_str_eq(st_at(f, 0)->name, "a"); /* sorted by offset */
    cr_assert_str_eq(st_at(f, 3)->name, "b");
    st_close(f);
}

/* ---- writing ---- */

static void write_w(float value, size_t n)
{
    float *w = malloc(n * sizeof *w);
    cr_assert_not_null(w);
    for (size_t i = 0; i < n; i++) w[i] = value;
    st_tensor t = {"w", ST_F32, 1, {(int64_t)n}, w};
    char err[256];
    cr_assert_eq(st_write(path, &t, 1, NULL, 0, err, sizeof err), 0, "%s", err);
    free(w);
}

Test(safetensors, writing_replaces_the_file_so_a_second_link_keeps_the_old_bytes)
{
    char link_path[160];
    snprintf(link_path, sizeof link_path, "%s/old-export", dir);
    write_w(1, 4);
    cr_assert_eq(link(path, link_path), 0);
    write_w(2, 4);
    float got[4];
    read_whole(path, got, 4);
    cr_assert_eq(got[3], 2);
    read_whole(link_path, got, 4); /* the old inode, untouched */
    cr_assert_eq(got[3], 1, "the new export was written into the old file in place");
    unlink(link_path);
}

/* In a child with RLIMIT_FSIZE below the new file's size: SIGXFSZ ignored,
 * the write fails (EFBIG) and st_write returns -1; SIGXFSZ default, the
 * writer is killed midway. */
static int write_in_limited_child(int kill_it)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, kill_it ? SIG_DFL : SIG_IGN);
        struct rlimit rl = {65536, 65536};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
        static float w[1 << 16];
        st_tensor t = {"w", ST_F32, 1, {1 << 16}, w};
        char err[256];
        int rc = st_write(path, &t, 1, NULL, 0, err, sizeof err);
        _exit(rc == -1 && strstr(err, path) && strstr(err, "write failed") ? 0 : 11);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

Test(safetensors, a_write_that_fails_midway_leaves_the_old_file_and_no_temporary)
{
    write_w(1, 4);
    int status = write_in_limited_child(0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child's st_write did not fail as expected (status %d)", status);
    float got[4];
    read_whole(path, got, 4);
    cr_assert_eq(got[3], 1);
    char others[256];
    cr_assert_eq(other_files(others, sizeof others), 0, "left behind: %s", others);
}

Test(safetensors, a_writer_killed_midway_leaves_the_old_file_and_a_temporary_file_check_output_removes)
{
    write_w(1, 4);
    int status = write_in_limited_child(1);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ, "status %d", status);
    float got[4];
    read_whole(path, got, 4);
    cr_assert_eq(got[3], 1);
    char others[256], err[256];
    cr_assert_eq(other_files(others, sizeof others), 1, "left behind: %s", others);
    cr_assert(strncmp(others, ".vitjob-tmp.", 12) == 0, "left behind: %s", others);
    int removed = -1;
    cr_assert_eq(file_check_output(path, &removed, err, sizeof err), 0, "%s", err);
    cr_assert_eq(removed, 1);
    cr_assert_eq(other_files(others, sizeof others), 0, "left behind: %s", others);
}

Test(safetensors, writing_over_a_fifo_or_a_directory_is_refused_and_leaves_it)
{
    float a[1] = {1};
    st_tensor t = {"w", ST_F32, 1, {1}, a};
    char err[256];
    struct stat st;
    cr_assert_eq(mkfifo(path, 0600), 0);
    cr_assert_eq(st_write(path, &t, 1, NULL, 0, err, sizeof err), -1);
    cr_assert(strstr(err, path) && strstr(err, "FIFO"), "%s", err);
    cr_assert(stat(path, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    unlink(path);
    cr_assert_eq(mkdir(path, 0700), 0);
    cr_assert_eq(st_write(path, &t, 1, NULL, 0, err, sizeof err), -1);
    cr_assert(strstr(err, path) && strstr(err, "directory"), "%s", err);
    cr_assert(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(path);
    char others[256];
    cr_assert_eq(other_files(others, sizeof others), 0, "left behind: %s", others);
}
