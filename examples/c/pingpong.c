/*
 * Tagged ping-pong between two processes over libxfer's C ABI.
 *
 * Build (from the repository root, after `cargo build --release`):
 *   cc examples/c/pingpong.c -Iinclude -Ltarget/release -lxfer -o pingpong
 *
 * Run:
 *   LD_LIBRARY_PATH=target/release ./pingpong server
 *       prints: pingpong server: NAME   (the endpoint name in hex)
 *   LD_LIBRARY_PATH=target/release ./pingpong client NAME [ROUNDS [SIZE]]
 *
 * The client first sends a "hello" (tag 0) carrying its own name, the number
 * of rounds and the message size, so the server can answer; then each round
 * is a tagged message (tag 1) sent to the server and echoed back. XFER_*
 * variables apply (XFER_PROVIDER, XFER_TCP_ADDR=127.0.0.1 for loopback).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xfer.h"

#define TAG_HELLO 0
#define TAG_PING 1

static void die(const char *what, int rc)
{
    fprintf(stderr, "pingpong: %s: %s (%d)\n", what, xfer_strerror(rc), rc);
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

/* The wire form of the client's first message. */
struct hello {
    uint32_t rounds;
    uint32_t size;
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

/* Waits until `count` completions have arrived; any error ends the program. */
static void wait_for(struct node *n, int count, xfer_cq_entry_t *last_recv)
{
    while (count > 0) {
        xfer_cq_entry_t e[4];
        int got = xfer_cq_wait(n->cq, e, 4, 30000);
        if (got < 0)
            die("xfer_cq_wait", got);
        for (int i = 0; i < got; i++) {
            if (e[i].err != 0)
                die("operation", e[i].err);
            if ((e[i].flags & XFER_RECV) && last_recv)
                *last_recv = e[i];
        }
        count -= got;
    }
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int server(void)
{
    struct node n;
    node_open(&n);
    printf("pingpong server: ");
    for (size_t i = 0; i < n.name_len; i++)
        printf("%02x", n.name[i]);
    printf("\n");
    fflush(stdout);

    struct hello h;
    xfer_cq_entry_t e;
    TRY(xfer_ep_trecv(n.ep, &h, sizeof h, XFER_ADDR_UNSPEC, TAG_HELLO, 0, NULL));
    wait_for(&n, 1, &e);
    if (e.len != sizeof h || h.name_len > XFER_NAME_MAX) {
        fprintf(stderr, "pingpong: malformed hello\n");
        return 1;
    }
    xfer_addr_t client;
    TRY(xfer_av_insert(n.av, h.name, h.name_len, &client));

    uint8_t *buf = malloc(h.size ? h.size : 1);
    for (uint32_t r = 0; r < h.rounds; r++) {
        TRY(xfer_ep_trecv(n.ep, buf, h.size, client, TAG_PING, 0, NULL));
        wait_for(&n, 1, &e);
        TRY(xfer_ep_tsend(n.ep, buf, e.len, client, TAG_PING, NULL));
        wait_for(&n, 1, NULL);
    }
    free(buf);
    node_close(&n);
    printf("pingpong server: %u rounds of %u bytes done\n", h.rounds, h.size);
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

static int client(const char *server_hex, uint32_t rounds, uint32_t size)
{
    uint8_t server_name[XFER_NAME_MAX];
    size_t server_len;
    if (parse_hex(server_hex, server_name, &server_len) != 0) {
        fprintf(stderr, "pingpong: NAME must be the hex string the server printed\n");
        return 2;
    }
    struct node n;
    node_open(&n);
    xfer_addr_t srv;
    TRY(xfer_av_insert(n.av, server_name, server_len, &srv));

    struct hello h = {rounds, size, (uint32_t)n.name_len, {0}};
    memcpy(h.name, n.name, n.name_len);
    TRY(xfer_ep_tsend(n.ep, &h, sizeof h, srv, TAG_HELLO, NULL));
    wait_for(&n, 1, NULL);

    uint8_t *out = malloc(size ? size : 1), *in = malloc(size ? size : 1);
    for (uint32_t i = 0; i < size; i++)
        out[i] = (uint8_t)(i * 7 + 1);
    double t0 = now_us();
    xfer_cq_entry_t e;
    for (uint32_t r = 0; r < rounds; r++) {
        TRY(xfer_ep_trecv(n.ep, in, size, srv, TAG_PING, 0, NULL));
        TRY(xfer_ep_tsend(n.ep, out, size, srv, TAG_PING, NULL));
        wait_for(&n, 2, &e);
        if (e.len != size || memcmp(in, out, size) != 0) {
            fprintf(stderr, "pingpong: round %u came back different\n", r);
            return 1;
        }
    }
    double elapsed = now_us() - t0;
    printf("pingpong client: %u rounds of %u bytes, %.2f us half round trip\n", rounds, size,
           rounds ? elapsed / rounds / 2 : 0.0);
    free(out);
    free(in);
    node_close(&n);
    return 0;
}

int main(int argc, char **argv)
{
    if (xfer_version() != XFER_VERSION)
        fprintf(stderr, "pingpong: warning: built against xfer.h %d.%d.%d but running libxfer %s\n",
                XFER_VERSION_MAJOR, XFER_VERSION_MINOR, XFER_VERSION_PATCH, xfer_version_string());
    if (argc == 2 && strcmp(argv[1], "server") == 0)
        return server();
    if (argc >= 3 && argc <= 5 && strcmp(argv[1], "client") == 0) {
        uint32_t rounds = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 1000;
        uint32_t size = argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 10) : 64;
        return client(argv[2], rounds, size);
    }
    fprintf(stderr, "usage: %s server\n       %s client NAME [ROUNDS [SIZE]]\n", argv[0], argv[0]);
    return 2;
}
