/* tests/test_tar.c - worker/data/tar.c: what the writer writes reads back
 * byte for byte (ustar names, prefix/name splits, pax long names) through a
 * stream that yields a few bytes at a time, and the same input writes the
 * same bytes; what Python's tarfile writes (pax path and size records, GNU
 * long names, ustar prefixes, directories and links between the files)
 * reads as the same members; and a stream cut anywhere before its end
 * blocks, a bad checksum, a member over the limit or a malformed pax
 * record is an error naming the shard and the byte offset, and a failing
 * stream a read error naming it. (Mutations of whole shards, under ASan
 * too: tests/test_wds.c and tests/test_fuzz_data.c.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tar.h"
#include "tar_fixture.h"

TestSuite(tar, .timeout = 60);

static char long300[301], split[200];

static void names(void)
{
    memset(long300, 'n', 300); /* no '/': only pax can hold it */
    long300[300] = '\0';
    /* 120 + '/' + 60: ustar's prefix/name split */
    memset(split, 'p', 120);
    split[120] = '/';
    memset(split + 121, 'q', 60);
    split[181] = '\0';
}

/* Reads every member of buf; checks them against want; returns the end code. */
static int read_all(const unsigned char *buf, size_t len, const fx_member *want, size_t n,
                    char *err, size_t errlen)
{
    tar_mem src = {buf, len, 0};
    tar_reader *r = tar_reader_new("test.tar", trickle_read, &src, 1 << 20);
    cr_assert_not_null(r);
    tar_member m;
    size_t i = 0;
    int rc;
    while ((rc = tar_reader_next(r, &m, err, errlen)) == 1) {
        cr_assert_lt(i, n, "more members than written: %s", m.name);
        cr_assert_str_eq(m.name, want[i].name);
        cr_assert_eq(m.size, want[i].size, "%s: %llu bytes", m.name, (unsigned long long)m.size);
        if (m.size)
            cr_assert_eq(memcmp(m.data, want[i].data, m.size), 0, "%s: bytes differ", m.name);
        i++;
    }
    if (rc == 0)
        cr_assert_eq(i, n, "%zu of %zu members", i, n);
    tar_reader_free(r);
    return rc;
}

Test(tar, what_the_writer_writes_reads_back_byte_for_byte, .init = names)
{
    static char big[1300];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)(i * 7 + 3);
    char n100[101];
    memset(n100, 'h', 100);
    n100[100] = '\0';
    fx_member m[] = {
        {"a/img_0001.jpg", big, sizeof big}, {"a/img_0001.cls", "7\n", 2},
        {"empty.txt", "", 0},                {n100, "x", 1},
        {split, big, 512},                   {long300, big, 511},
        {"last.bin", big, 513},
    };
    membuf b;
    fx_write(&b, m, 7);
    char err[512] = "";
    cr_assert_eq(read_all(b.p, b.n, m, 7, err, sizeof err), 0, "%s", err);
    free(b.p);
}

Test(tar, the_same_input_writes_the_same_bytes, .init = names)
{
    fx_member m[] = {{"b.cls", "1", 1}, {long300, "abc", 3}, {split, "", 0}};
    membuf x, y;
    fx_write(&x, m, 3);
    fx_write(&y, m, 3);
    cr_assert_eq(x.n, y.n);
    cr_assert_eq(memcmp(x.p, y.p, x.n), 0);
    /* the fixed fields: mode, uid, gid, mtime of the first header */
    cr_assert_eq(memcmp(x.p + 100, "0000644", 8), 0);
    cr_assert_eq(memcmp(x.p + 108, "0000000", 8), 0);
    cr_assert_eq(memcmp(x.p + 136, "00000000000", 12), 0);
    /* two headers + data blocks + pax header and record + end blocks */
    cr_assert_eq(x.n, 512 * (2 + 2 + 2 + 1) + 1024);
    free(x.p);
    free(y.p);
}

/* Python's tarfile, each member in the format that exercises one path. */
static const char *PY =
    "import io, sys, tarfile\n"
    "def data(i, n): return bytes((i * 31 + j) % 251 for j in range(n))\n"
    "t = tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT)\n"
    "def add(name, n, i, fmt, pax=None):\n"
    "    t.format = fmt\n"
    "    ti = tarfile.TarInfo(name); ti.size = n; ti.mtime = 1700000000\n"
    "    if pax: ti.pax_headers = pax\n"
    "    t.addfile(ti, io.BytesIO(data(i, n)))\n"
    "d = tarfile.TarInfo('dir'); d.type = tarfile.DIRTYPE; t.addfile(d)\n"
    "add('dir/short.jpg', 1000, 0, tarfile.USTAR_FORMAT)\n"
    "add('p' * 120 + '/' + 'q' * 60 + '.cls', 3, 1, tarfile.USTAR_FORMAT)\n"
    "add('x' * 150 + '.png', 700, 2, tarfile.PAX_FORMAT)\n"
    "add('dir/\\u00fcnicode_\\u00e9.jpg', 10, 3, tarfile.PAX_FORMAT)\n"
    "add('g' * 200 + '.json', 20, 4, tarfile.GNU_FORMAT)\n"
    "add('withsize.bin', 513, 5, tarfile.PAX_FORMAT, {'size': '513', 'comment': 'hi'})\n"
    "s = tarfile.TarInfo('link'); s.type = tarfile.SYMTYPE; s.linkname = 'l' * 150\n"
    "t.format = tarfile.GNU_FORMAT; t.addfile(s)\n"
    "add('after_link.cls', 2, 6, tarfile.USTAR_FORMAT)\n"
    "t.close()\n";

Test(tar, what_pythons_tarfile_writes_reads_as_the_same_members)
{
    char dir[] = "/tmp/vitjob-tar-XXXXXX", path[64], cmd[4096];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/py.tar", dir);
    char script[64];
    snprintf(script, sizeof script, "%s/w.py", dir);
    FILE *f = fopen(script, "w");
    cr_assert_not_null(f);
    fputs(PY, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, path);
    cr_assert_eq(system(cmd), 0, "python3's tarfile failed");
    f = fopen(path, "rb");
    cr_assert_not_null(f);
    static unsigned char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);

    char p120[200], x150[200], g200[220];
    memset(p120, 'p', 120);
    p120[120] = '/';
    memset(p120 + 121, 'q', 60);
    strcpy(p120 + 181, ".cls");
    memset(x150, 'x', 150);
    strcpy(x150 + 150, ".png");
    memset(g200, 'g', 200);
    strcpy(g200 + 200, ".json");
    struct { const char *name; size_t size; } want[] = {
        {"dir/short.jpg", 1000}, {p120, 3}, {x150, 700}, {"dir/\xc3\xbcnicode_\xc3\xa9.jpg", 10},
        {g200, 20}, {"withsize.bin", 513}, {"after_link.cls", 2},
    };
    tar_mem src = {buf, len, 0};
    tar_reader *r = tar_reader_new("py.tar", tar_mem_read, &src, 1 << 20);
    tar_member m;
    char err[512] = "";
    for (size_t i = 0; i < 7; i++) {
        cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), 1, "member %zu: %s", i, err);
        cr_assert_str_eq(m.name, want[i].name);
        cr_assert_eq(m.size, want[i].size, "%s", m.name);
        for (size_t j = 0; j < m.size; j++)
            cr_assert_eq(m.data[j], (unsigned char)((i * 31 + j) % 251), "%s byte %zu", m.name, j);
    }
    cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), 0, "the end stays the end");
    tar_reader_free(r);
}

/* One ustar header block with its checksum. */
static void header(unsigned char *b, const char *name, char type, const char *size_octal)
{
    memset(b, 0, 512);
    memcpy(b, name, strlen(name));
    memcpy(b + 100, "0000644", 8);
    memcpy(b + 124, size_octal, strlen(size_octal));
    b[156] = (unsigned char)type;
    memcpy(b + 257, "ustar", 6);
    memcpy(b + 263, "00", 2);
    memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += b[i];
    snprintf((char *)b + 148, 8, "%06o", sum);
}

Test(tar, a_pax_size_overrides_the_ustar_size_field)
{
    static unsigned char t[512 * 6];
    const char *rec = "9 size=5\n"; /* its length counts itself */
    header(t, "././@PaxHeader", 'x', "00000000011");
    memcpy(t + 512, rec, 9);
    header(t + 1024, "five.bin", '0', "00000000000");
    memcpy(t + 1536, "hello", 5);
    tar_mem src = {t, sizeof t, 0};
    tar_reader *r = tar_reader_new("pax.tar", tar_mem_read, &src, 100);
    tar_member m;
    char err[512] = "";
    cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), 1, "%s", err);
    cr_assert_str_eq(m.name, "five.bin");
    cr_assert_eq(m.size, 5);
    cr_assert_eq(memcmp(m.data, "hello", 5), 0);
    cr_assert_eq(m.offset, 0, "the member starts at its pax header");
    cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), 0, "%s", err);
    tar_reader_free(r);
}

Test(tar, a_malformed_pax_record_names_its_header_offset)
{
    static unsigned char t[512 * 6];
    header(t, "a.bin", '0', "00000000001");
    header(t + 1024, "././@PaxHeader", 'x', "00000000011");
    memcpy(t + 1536, "99 size=5\n", 10); /* longer than the header's data */
    header(t + 2048, "five.bin", '0', "00000000000");
    tar_mem src = {t, sizeof t, 0};
    tar_reader *r = tar_reader_new("pax.tar", tar_mem_read, &src, 100);
    tar_member m;
    char err[512] = "";
    cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), 1, "%s", err);
    cr_assert_eq(tar_reader_next(r, &m, err, sizeof err), -1);
    cr_assert(strstr(err, "shard pax.tar: pax header at offset 1024: malformed record"), "%s", err);
    tar_reader_free(r);
}

static void must_fail_with(const unsigned char *buf, size_t len, uint64_t limit, const char *want)
{
    tar_mem src = {buf, len, 0};
    tar_reader *r = tar_reader_new("s3://b/train-000007.tar", tar_mem_read, &src, limit);
    tar_member m;
    char err[512] = "";
    int rc;
    while ((rc = tar_reader_next(r, &m, err, sizeof err)) == 1)
        ;
    cr_assert_eq(rc, -1, "cut at %zu: read as a whole archive", len);
    cr_assert(strstr(err, "shard s3://b/train-000007.tar: "), "%s", err);
    cr_assert(strstr(err, want), "'%s' not in: %s", want, err);
    char again[512] = "";
    cr_assert_eq(tar_reader_next(r, &m, again, sizeof again), -1, "a failed reader stays failed");
    cr_assert_str_eq(again, err);
    tar_reader_free(r);
}

Test(tar, a_stream_cut_at_any_block_or_inside_a_member_names_the_offset, .init = names)
{
    static char data[2000];
    memset(data, 'd', sizeof data);
    fx_member m[] = {{"k/a.jpg", data, 2000}, {"k/a.cls", "3", 1}, {long300, data, 100}};
    membuf b;
    fx_write(&b, m, 3);
    char want[64];
    for (size_t cut = 0; cut < b.n; cut += 512) {
        snprintf(want, sizeof want, "truncated at offset %zu", cut);
        must_fail_with(b.p, cut, 1 << 20, want);
    }
    size_t mids[] = {1, 511, 513, 700, 2500, 3000, b.n - 1};
    for (size_t i = 0; i < sizeof mids / sizeof *mids; i++) {
        snprintf(want, sizeof want, "truncated at offset %zu", mids[i]);
        must_fail_with(b.p, mids[i], 1 << 20, want);
    }
    /* inside the first member's data: named, with its header's offset */
    must_fail_with(b.p, 1000, 1 << 20,
                   "truncated at offset 1000: member 'k/a.jpg' (header at offset 0) has 488 of "
                   "its 2000 bytes");
    free(b.p);
}

Test(tar, a_bad_checksum_names_the_header_offset)
{
    fx_member m[] = {{"a.jpg", "xyz", 3}, {"a.cls", "1", 1}};
    membuf b;
    fx_write(&b, m, 2);
    b.p[1024 + 3] ^= 0x20; /* the second header's name */
    must_fail_with(b.p, b.n, 1 << 20, "header at offset 1024: checksum mismatch");
    free(b.p);
}

Test(tar, a_member_over_the_limit_is_refused_before_its_data_is_read)
{
    static char data[5000];
    fx_member m[] = {{"small.cls", "1", 1}, {"big.jpg", data, 5000}};
    membuf b;
    fx_write(&b, m, 2);
    must_fail_with(b.p, b.n, 4096,
                   "member 'big.jpg' at offset 1024: 5000 bytes, more than the limit of 4096");
    /* a size field set huge (base-256, as GNU tar writes > 8 GiB) */
    b.p[1024 + 124] = 0x80;
    memset(b.p + 1024 + 125, 0, 3);
    memset(b.p + 1024 + 128, 0xff, 8); /* 2^64 - 1 */
    memset(b.p + 1024 + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += b.p[1024 + i];
    snprintf((char *)b.p + 1024 + 148, 8, "%06o", sum);
    must_fail_with(b.p, b.n, 1 << 20, "member 'big.jpg' at offset 1024: ");
    free(b.p);
}

Test(tar, a_single_zero_block_then_a_header_is_corrupt)
{
    fx_member m[] = {{"a.cls", "1", 1}};
    membuf b;
    fx_write(&b, m, 1);
    unsigned char t[512 * 5];
    memcpy(t, b.p, 1024);
    memset(t + 1024, 0, 512);
    memcpy(t + 1536, b.p, 1024);
    must_fail_with(t, sizeof t, 1 << 20,
                   "a single zero block at offset 1024, then a header at offset 1536");
    free(b.p);
}

/* a stream whose reads fail (-1) once they would reach byte fail_at */
typedef struct {
    tar_mem m;
    size_t fail_at;
} failing_mem;

static ssize_t failing_read(void *ctx, void *buf, size_t n)
{
    failing_mem *f = ctx;
    if (f->m.pos + n > f->fail_at)
        return -1;
    return tar_mem_read(&f->m, buf, n);
}

/* Found by tests/test_fuzz_data.c: a read error in the padding after a pax
 * header's records was reported as the archive being cut short there. */
Test(tar, a_read_error_in_a_pax_headers_padding_is_a_read_error_not_a_cut, .init = names)
{
    fx_member m[] = {{long300, "x", 1}};
    membuf b;
    fx_write(&b, m, 1);
    /* the pax header: its block, then "310 path=nnn...\n" (310 bytes), then 202 of padding */
    cr_assert_eq(b.p[156], 'x');
    failing_mem src = {{b.p, b.n, 0}, 900};
    tar_reader *r = tar_reader_new("t.tar", failing_read, &src, 1 << 20);
    tar_member mm;
    char err[512] = "";
    cr_assert_eq(tar_reader_next(r, &mm, err, sizeof err), -1);
    cr_expect_str_eq(err, "shard t.tar: read error at offset 822");
    tar_reader_free(r);
    free(b.p);
}
