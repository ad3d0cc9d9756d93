/* tests/test_wds.c - worker/data/wds.c: consecutive members sharing a key
 * make one sample, with its image (jpg/jpeg/png in any case) and its label
 * from .cls (whitespace allowed) or .json; bad samples (no image, no label,
 * unknown extensions only, a label that is not an integer, two images) are
 * reported naming the shard, the key and the offset, and the stream goes
 * on; and thousands of deterministic mutations of a valid shard (byte
 * flips, headers changed with their checksums fixed, huge sizes, cuts)
 * never crash, hang or leak (tests/run.sh runs this under ASan too). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tar_fixture.h"
#include "wds.h"

TestSuite(wds, .timeout = 120);

typedef struct {
    wds_status st;
    const char *key_or_msg; /* the key of a sample, or a part of the message */
    int label;
    size_t image_size;
} want_t;

static void expect(const membuf *b, const want_t *want, size_t n)
{
    tar_mem src = {b->p, b->n, 0};
    wds_reader *w = wds_reader_new("shard-0.tar", trickle_read, &src, 1 << 20);
    cr_assert_not_null(w);
    char err[512];
    wds_sample s;
    for (size_t i = 0; i < n; i++) {
        err[0] = '\0';
        wds_status st = wds_next(w, &s, err, sizeof err);
        cr_assert_eq(st, want[i].st, "item %zu: status %d (%s)", i, st, err);
        if (st == WDS_SAMPLE) {
            cr_assert_str_eq(s.key, want[i].key_or_msg);
            cr_assert_eq(s.label, want[i].label, "%s", s.key);
            cr_assert_eq(s.image_size, want[i].image_size, "%s", s.key);
        } else {
            cr_assert(strstr(err, want[i].key_or_msg), "item %zu: '%s' not in: %s", i,
                      want[i].key_or_msg, err);
        }
    }
    cr_assert_eq(wds_next(w, &s, err, sizeof err), WDS_END, "%s", err);
    cr_assert_eq(wds_next(w, &s, err, sizeof err), WDS_END);
    wds_reader_free(w);
}

Test(wds, members_sharing_a_key_make_one_sample_labelled_by_cls_or_json)
{
    fx_member m[] = {
        {"dir/img_0001.jpg", "JPEGDATA", 8}, {"dir/img_0001.cls", " 7\n", 3},
        {"dir/img_0002.cls", "12", 2},       {"dir/img_0002.PNG", "PNG", 3},
        {"dir/img_0002.txt", "ignored", 7},
        {"img_0003.json", "{\"label\": 4, \"caption\": \"a cat\"}", 32},
        {"img_0003.Jpeg", "J", 1},
        /* .cls wins over .json; "a.b.c" has the key "x/a", extension "b.c" */
        {"x/a.jpg", "12345", 5}, {"x/a.json", "{\"label\": 9}", 12}, {"x/a.cls", "1", 1},
        {"x/a.b.c", "?", 1},
        {"dir/img_0001.jpg", "again", 5}, {"dir/img_0001.cls", "0", 1},
    };
    membuf b;
    fx_write(&b, m, sizeof m / sizeof *m);
    want_t want[] = {
        {WDS_SAMPLE, "dir/img_0001", 7, 8}, {WDS_SAMPLE, "dir/img_0002", 12, 3},
        {WDS_SAMPLE, "img_0003", 4, 1},     {WDS_SAMPLE, "x/a", 1, 5},
        {WDS_SAMPLE, "dir/img_0001", 0, 5}, /* a key again later: a sample again */
    };
    expect(&b, want, 5);
    free(b.p);
}

Test(wds, the_image_extension_and_offset_come_with_the_sample)
{
    fx_member m[] = {{"a.cls", "1", 1}, {"b.Png", "P", 1}, {"b.cls", "2", 1}};
    membuf b;
    fx_write(&b, m, 3);
    tar_mem src = {b.p, b.n, 0};
    wds_reader *w = wds_reader_new("s.tar", tar_mem_read, &src, 100);
    wds_sample s;
    char err[512];
    cr_assert_eq(wds_next(w, &s, err, sizeof err), WDS_BAD);
    cr_assert_eq(wds_next(w, &s, err, sizeof err), WDS_SAMPLE, "%s", err);
    cr_assert_str_eq(s.image_ext, "Png");
    cr_assert_eq(s.offset, 1024);
    cr_assert_eq(s.image[0], 'P');
    wds_reader_free(w);
    free(b.p);
}

Test(wds, bad_samples_are_reported_with_shard_key_and_offset_and_the_stream_goes_on)
{
    fx_member m[] = {
        {"d/noimg.cls", "1", 1},                                         /* 0 */
        {"d/nolabel.jpg", "J", 1},                                       /* 1024 */
        {"d/unknown.txt", "t", 1}, {"d/unknown.npy", "n", 1},            /* 2048 */
        {"d/badcls.jpg", "J", 1}, {"d/badcls.cls", "seven", 5},          /* 4096 */
        {"d/negcls.jpg", "J", 1}, {"d/negcls.cls", "-1", 2},             /* 6144 */
        {"d/badjson.jpg", "J", 1}, {"d/badjson.json", "{\"label\":1.5}", 13},
        {"d/two.jpg", "J", 1}, {"d/two.png", "P", 1}, {"d/two.cls", "1", 1},
        {"d/twice.jpg", "J", 1}, {"d/twice.cls", "1", 1}, {"d/twice.cls", "2", 1},
        {"d/noext", "?", 1},
        {"d/good.jpg", "JJ", 2}, {"d/good.cls", "\t3 ", 3},
    };
    membuf b;
    fx_write(&b, m, sizeof m / sizeof *m);
    want_t want[] = {
        {WDS_BAD, "shard shard-0.tar: sample 'd/noimg' at offset 0: no image", 0, 0},
        {WDS_BAD, "sample 'd/nolabel' at offset 1024: no label", 0, 0},
        {WDS_BAD, "sample 'd/unknown' at offset 2048: no member this reader knows (members: "
                  "txt, npy)", 0, 0},
        {WDS_BAD, "sample 'd/badcls' at offset 4096: its .cls is not a decimal integer", 0, 0},
        {WDS_BAD, "sample 'd/negcls' at offset 6144: its .cls is not a decimal integer", 0, 0},
        {WDS_BAD, "sample 'd/badjson' at offset 8192: no label (its .json has no integer", 0, 0},
        {WDS_BAD, "sample 'd/two' at offset 10240: two images", 0, 0},
        {WDS_BAD, "sample 'd/twice' at offset 13312: the extension cls given twice", 0, 0},
        {WDS_BAD, "sample 'd/noext' at offset 16384: no member this reader knows (members: "
                  "(none))", 0, 0},
        {WDS_SAMPLE, "d/good", 3, 2},
    };
    expect(&b, want, sizeof want / sizeof *want);
    free(b.p);
}

Test(wds, a_broken_stream_ends_the_samples_with_its_offset)
{
    fx_member m[] = {{"a.jpg", "J", 1}, {"a.cls", "1", 1}, {"b.jpg", "J", 1}, {"b.cls", "2", 1}};
    membuf b;
    fx_write(&b, m, 4);
    tar_mem src = {b.p, 2048 + 300, 0}; /* inside b.jpg's header */
    wds_reader *w = wds_reader_new("s.tar", tar_mem_read, &src, 100);
    wds_sample s;
    char err[512];
    cr_assert_eq(wds_next(w, &s, err, sizeof err), WDS_ERROR, "a's sample needs b's header");
    cr_assert(strstr(err, "shard s.tar: truncated at offset 2348: inside the header at offset 2048"), "%s", err);
    cr_assert_eq(wds_next(w, &s, err, sizeof err), WDS_ERROR);
    wds_reader_free(w);
    free(b.p);
}

/* Sets a header's checksum right, so that a mutation gets past it. */
static void fix_checksum(unsigned char *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

Test(wds, thousands_of_mutations_of_a_shard_never_crash_hang_or_leak, .timeout = 300)
{
    static char img[3000];
    for (size_t i = 0; i < sizeof img; i++)
        img[i] = (char)i;
    char lng[260];
    memset(lng, 'L', 250);
    strcpy(lng + 250, ".jpg");
    fx_member m[] = {
        {"s/0001.jpg", img, 3000}, {"s/0001.cls", "1", 1}, {lng, img, 600},
        {"s/0002.png", img, 100},  {"s/0002.json", "{\"label\": 2}", 12},
    };
    membuf b;
    fx_write(&b, m, 5);
    /* a GNU long name member in front, by hand */
    unsigned char gnu[512 * 4];
    memset(gnu, 0, sizeof gnu);
    memcpy(gnu, "././@LongLink", 13);
    memcpy(gnu + 100, "0000644", 8);
    memcpy(gnu + 124, "00000000013", 12);
    gnu[156] = 'L';
    memcpy(gnu + 257, "ustar  ", 8);
    fix_checksum(gnu);
    memcpy(gnu + 512, "s/0000.cls", 11);
    memcpy(gnu + 1024, b.p + 512 + 3072, 1024); /* s/0001.cls's header and data */
    fix_checksum(gnu + 1024);
    size_t base_n = sizeof gnu + b.n;
    unsigned char *base = malloc(base_n), *t = malloc(base_n);
    memcpy(base, gnu, sizeof gnu);
    memcpy(base + sizeof gnu, b.p, b.n);
    free(b.p);
    /* the blocks that are headers, to aim some mutations at */
    size_t hdr[64], nh = 0;
    {
        tar_mem src = {base, base_n, 0};
        tar_reader *r = tar_reader_new("base.tar", tar_mem_read, &src, 1 << 20);
        tar_member mm;
        char err[512];
        uint64_t at = 0;
        int rc;
        while ((rc = tar_reader_next(r, &mm, err, sizeof err)) == 1) {
            for (uint64_t o = at; o < tar_reader_offset(r) && nh < 64; o += 512)
                if (!memcmp(base + o + 257, "ustar", 5))
                    hdr[nh++] = (size_t)o;
            at = tar_reader_offset(r);
        }
        cr_assert_eq(rc, 0, "the base shard is valid: %s", err);
        tar_reader_free(r);
    }
    cr_assert_geq(nh, 7);
    rng_state g;
    rng_seed(&g, 25, 0, 0);
    int outcomes[4] = {0};
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(t, base, base_n);
        size_t n = base_n;
        size_t h = hdr[rng_below(&g, nh)];
        switch (iter % 5) {
        case 0: /* byte flips anywhere */
            for (int k = 1 + (int)rng_below(&g, 8); k > 0; k--)
                t[rng_below(&g, n)] ^= (unsigned char)(1 + rng_below(&g, 255));
            break;
        case 1: /* a header byte changed, the checksum made right */
            t[h + rng_below(&g, 512)] = (unsigned char)rng_u64(&g);
            fix_checksum(t + h);
            break;
        case 2: { /* a size field set huge or odd, checksum right */
            static const char *sizes[] = {"77777777777", "00000001000", "7777777777 ",
                                          "00000000000", "1x", "\x80\xff\xff\xff\xff\xff\xff"
                                          "\xff\xff\xff\xff\xff"};
            const char *s = sizes[rng_below(&g, 6)];
            memset(t + h + 124, 0, 12);
            memcpy(t + h + 124, s, strlen(s) > 12 ? 12 : strlen(s));
            fix_checksum(t + h);
            break;
        }
        case 3: /* cut anywhere */
            n = (size_t)rng_below(&g, n);
            break;
        case 4: /* a pax or long name header's data scrambled */
            for (int k = 0; k < 16; k++)
                t[h + 512 + rng_below(&g, 512)] = (unsigned char)rng_below(&g, 128);
            break;
        }
        tar_mem src = {t, n, 0};
        wds_reader *w = wds_reader_new("fuzz.tar", tar_mem_read, &src, 1 << 16);
        wds_sample s;
        char err[512];
        int steps = 0;
        wds_status st;
        while ((st = wds_next(w, &s, err, sizeof err)) == WDS_SAMPLE || st == WDS_BAD) {
            if (st == WDS_SAMPLE) /* touch every byte handed out */
                for (size_t i = 0; i < s.image_size; i++)
                    steps += s.image[i] == 0xfe;
            cr_assert_lt(++steps, 1000000, "iteration %d does not end", iter);
        }
        if (st == WDS_ERROR)
            cr_assert(strstr(err, "shard fuzz.tar: ") && strstr(err, "offset"),
                      "iteration %d: %s", iter, err);
        outcomes[st + 1]++;
        wds_reader_free(w);
    }
    cr_log_info("mutations: %d ended in an error, %d read to the end", outcomes[0], outcomes[1]);
    cr_assert_gt(outcomes[0], 1000, "most mutations are caught");
    free(base);
    free(t);
}
