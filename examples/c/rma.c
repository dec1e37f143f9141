/*
 * RMA put/get between two processes over libxfer's C ABI.
 *
 * Build (from the repository root, after `cargo build --release`):
 *   cc examples/c/rma.c -Iinclude -Ltarget/release -lxfer -o rma
 *
 * Run:
 *   LD_LIBRARY_PATH=target/release ./rma server
 *       prints: rma server: NAME   (the endpoint name in hex)
 *   LD_LIBRARY_PATH=target/release ./rma client NAME [SIZE]
 *
 * The server registers a region (a greeting in its first 64 bytes, room for
 * SIZE <= 1 MiB bytes after it) for remote read and write. The client sends
 * its name (tag 0); the server answers with the region's packed remote key
 * (tag 1). The client then gets the greeting with xfer_ep_read, puts SIZE
 * bytes after it with xfer_ep_writedata (the server's CQ reports the write
 * with the immediate data, consuming no receive), gets them back and
 * compares, and says goodbye (tag 2). The server posts nothing for the RMA:
 * it only keeps polling its CQ, which is what moves the data. XFER_*
 * variables apply (XFER_TCP_ADDR=127.0.0.1 for loopback).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfer.h"

#define TAG_HELLO 0
#define TAG_RKEY 1
#define TAG_BYE 2
#define GREETING_LEN 64
#define MAX_SIZE (1u << 20)
#define REGION_LEN (GREETING_LEN + MAX_SIZE)

static void die(const char *what, int rc)
{
    fprintf(stderr, "rma: %s: %s (%d)\n", what, xfer_strerror(rc), rc);
    exit(1);
}

#define TRY(expr)                  \
    do {                           \
        int rc_ = (expr);          \
        if (rc_ < 0)               \
            die(#expr, rc_);       \
    } while (0)

struct node {
    xfer_domain_t *domain;
    xfer_cq_t *cq;
    xfer_av_t *av;
    xfer_ep_t *ep;
    uint8_t name[XFER_NAME_MAX];
    size_t name_len;
};

struct hello {
    uint32_t name_len;
    uint8_t name[XFER_NAME_MAX];
};

static void node_open(struct node *n)
{
    TRY(xfer_domain_open(NULL, &n->domain));
    TRY(xfer_cq_open(n->domain, 0, &n->cq));
    TRY(xfer_av_open(n->domain, &n->av));
    TRY(xfer_ep_open(n->domain, n->cq, n->av, NULL, &n->ep));
    n->name_len = sizeof n->name;
    TRY(xfer_ep_getname(n->ep, n->name, &n->name_len));
}

static void node_close(struct node *n)
{
    TRY(xfer_ep_close(n->ep));
    TRY(xfer_av_close(n->av));
    TRY(xfer_cq_close(n->cq));
    TRY(xfer_domain_close(n->domain));
}

/* Waits for one completion (any error ends the program) and returns it. */
static xfer_cq_entry_t wait_one(struct node *n)
{
    xfer_cq_entry_t e;
    int got = 0;
    while (got == 0) {
        got = xfer_cq_wait(n->cq, &e, 1, 30000);
        if (got < 0)
            die("xfer_cq_wait", got);
    }
    if (e.err != 0)
        die("operation", e.err);
    return e;
}

static int server(void)
{
    struct node n;
    node_open(&n);
    uint8_t *region = calloc(1, REGION_LEN);
    snprintf((char *)region, GREETING_LEN, "hello from the rma server");
    xfer_mr_t *mr;
    TRY(xfer_mr_reg(n.domain, region, REGION_LEN, XFER_MR_REMOTE_READ | XFER_MR_REMOTE_WRITE, &mr));

    printf("rma server: ");
    for (size_t i = 0; i < n.name_len; i++)
        printf("%02x", n.name[i]);
    printf("\n");
    fflush(stdout);

    struct hello h;
    TRY(xfer_ep_trecv(n.ep, &h, sizeof h, XFER_ADDR_UNSPEC, TAG_HELLO, 0, NULL));
    xfer_cq_entry_t e = wait_one(&n);
    if (e.len != sizeof h || h.name_len > XFER_NAME_MAX) {
        fprintf(stderr, "rma: malformed hello\n");
        return 1;
    }
    xfer_addr_t client;
    TRY(xfer_av_insert(n.av, h.name, h.name_len, &client));

    uint8_t key[XFER_RKEY_PACKED_LEN];
    size_t key_len = sizeof key;
    TRY(xfer_mr_rkey_pack(mr, key, &key_len));
    uint8_t bye;
    TRY(xfer_ep_trecv(n.ep, &bye, 1, client, TAG_BYE, 0, &bye));
    TRY(xfer_ep_tsend(n.ep, key, key_len, client, TAG_RKEY, key));

    /* Serve until goodbye; the put shows up as an entry with its data. */
    int done = 0;
    while (!done) {
        e = wait_one(&n);
        if (e.flags & XFER_REMOTE_WRITE)
            printf("rma server: client put %zu bytes, immediate data %" PRIu64 "\n", e.len, e.data);
        else if (e.op_context == &bye)
            done = 1;
    }
    TRY(xfer_mr_close(mr)); /* before freeing the memory */
    free(region);
    node_close(&n);
    printf("rma server: done\n");
    return 0;
}

static int parse_hex(const char *hex, uint8_t *out, size_t *len)
{
    size_t n = strlen(hex);
    if (n == 0 || n % 2 != 0 || n / 2 > XFER_NAME_MAX)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    *len = n / 2;
    return 0;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int client(const char *server_hex, uint32_t size)
{
    uint8_t server_name[XFER_NAME_MAX];
    size_t server_len;
    if (parse_hex(server_hex, server_name, &server_len) != 0) {
        fprintf(stderr, "rma: NAME must be the hex string the server printed\n");
        return 2;
    }
    if (size == 0 || size > MAX_SIZE) {
        fprintf(stderr, "rma: SIZE must be 1 to %u\n", MAX_SIZE);
        return 2;
    }
    struct node n;
    node_open(&n);
    xfer_addr_t srv;
    TRY(xfer_av_insert(n.av, server_name, server_len, &srv));

    /* Hello, and the server's key in return. */
    uint8_t packed[XFER_RKEY_PACKED_LEN];
    TRY(xfer_ep_trecv(n.ep, packed, sizeof packed, srv, TAG_RKEY, 0, NULL));
    struct hello h = {(uint32_t)n.name_len, {0}};
    memcpy(h.name, n.name, n.name_len);
    TRY(xfer_ep_tsend(n.ep, &h, sizeof h, srv, TAG_HELLO, NULL));
    xfer_cq_entry_t e = wait_one(&n), second = wait_one(&n); /* the send and the receive */
    if (!(e.flags & XFER_RECV))
        e = second;
    xfer_rkey_t rkey; /* a plain struct: nothing to free */
    TRY(xfer_rkey_unpack(packed, e.len, &rkey));

    /* Get the greeting. */
    char greeting[GREETING_LEN];
    TRY(xfer_ep_read(n.ep, greeting, sizeof greeting, srv, &rkey, 0, NULL));
    wait_one(&n);
    greeting[GREETING_LEN - 1] = '\0';
    printf("rma client: got \"%s\"\n", greeting);

    /* Put SIZE bytes after it, telling the server; get them back. */
    uint8_t *out = malloc(size), *in = calloc(1, size);
    for (uint32_t i = 0; i < size; i++)
        out[i] = (uint8_t)(i * 7 + 1);
    double t0 = now_us();
    TRY(xfer_ep_writedata(n.ep, out, size, size, srv, &rkey, GREETING_LEN, NULL));
    wait_one(&n); /* the server has applied it */
    double t1 = now_us();
    TRY(xfer_ep_read(n.ep, in, size, srv, &rkey, GREETING_LEN, NULL));
    wait_one(&n);
    double t2 = now_us();
    if (memcmp(in, out, size) != 0) {
        fprintf(stderr, "rma: the bytes read back differ from those written\n");
        return 1;
    }
    printf("rma client: put and got %u bytes (put %.1f us, get %.1f us)\n", size, t1 - t0, t2 - t1);

    uint8_t bye = 1;
    TRY(xfer_ep_tsend(n.ep, &bye, 1, srv, TAG_BYE, NULL));
    wait_one(&n);
    free(out);
    free(in);
    node_close(&n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "server") == 0)
        return server();
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "client") == 0)
        return client(argv[2], argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 65536);
    fprintf(stderr, "usage: %s server\n       %s client NAME [SIZE]\n", argv[0], argv[0]);
    return 2;
}
