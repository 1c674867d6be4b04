/* A paced streaming server for measuring load clients: OpenAI /v1/completions, one
 * server-sent event per write(), each token due at start + (i + 1) * gap.
 *
 *     cc -O2 -o paced_server paced_server.c && ./paced_server PORT GAP_US [GAPS_FILE]
 *
 * Single-threaded epoll with nanosecond timeouts, so the server costs a small part of a core
 * and is never the bottleneck: what a client measures against it is the client. Pacing is
 * against the request's start, so timer overshoot does not accumulate: the true mean gap is
 * exactly GAP_US whatever the load. GAP_US = 0 streams as fast as the client reads.
 *
 * Honours the request like vLLM: per-event usage only with
 * stream_options.continuous_usage_stats, a closing usage event only with include_usage.
 * max_tokens (or n_predict) comes from the JSON body. Binds 127.0.0.1 only.
 *
 * With GAPS_FILE, it records when it wrote each token and, on SIGTERM, writes every gap
 * between a stream's consecutive token writes (microseconds, one per line) there: the
 * true inter-token latencies at the server, to check a client's percentiles against.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 4096
#define IN_CHUNK 65536 /* read at a time; a request's buffer grows to hold its body */
#define OUT_CAP 65536

struct conn {
    int fd;
    long long last_write_ns;  /* when the stream's previous token was written */
    int streaming;           /* 1 while a completion is being sent */
    int tokens, sent;        /* asked for, sent so far */
    int usage_each, usage_end;
    long long start_ns;
    size_t in_len, in_cap;
    char *in;                /* grows: a long-context prompt is megabytes */
    size_t out_len, out_off; /* bytes not yet accepted by the socket */
    char out[OUT_CAP];
};

static struct conn *conns[MAX_CONNS];
static long long gap_ns;
static int epfd;
static int top_fd; /* highest fd seen: the scans stop there */
static float *gaps_us; /* recorded write gaps (GAPS_FILE given), growing */
static size_t gaps_len, gaps_cap;
static volatile sig_atomic_t stopping;

static void on_term(int sig) {
    (void)sig;
    stopping = 1;
}

static void record_gap(struct conn *c, long long now) {
    if (!gaps_us && !gaps_cap) return;
    if (c->sent > 1) {
        if (gaps_len == gaps_cap) {
            gaps_cap *= 2;
            gaps_us = realloc(gaps_us, gaps_cap * sizeof *gaps_us);
        }
        gaps_us[gaps_len++] = (float)(now - c->last_write_ns) / 1000.0f;
    }
    c->last_write_ns = now;
}

static int dump_gaps(const char *path) {
    FILE *out = fopen(path, "w");
    if (!out) return 1;
    for (size_t i = 0; i < gaps_len; i++) fprintf(out, "%.3f\n", gaps_us[i]);
    return fclose(out) != 0;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void close_conn(struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c->in);
    free(c);
}

/* Queue bytes and try to send them in one write(); 0 on success, -1 if the peer is gone. */
static int emit(struct conn *c, const char *data, size_t len) {
    if (c->out_len + len > OUT_CAP) return -1;
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (errno == EAGAIN) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.fd = c->fd};
                epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
                return 0;
            }
            return -1;
        }
        c->out_off += (size_t)n;
    }
    c->out_len = c->out_off = 0;
    return 0;
}

/* One HTTP chunk holding one server-sent event. */
static int emit_event(struct conn *c, const char *json) {
    char buf[1024];
    size_t body = strlen(json) + 8; /* "data: " + json + "\n\n" */
    int n = snprintf(buf, sizeof buf, "%zx\r\ndata: %s\n\n\r\n", body, json);
    return emit(c, buf, (size_t)n);
}

static int int_after(const char *body, const char *key, int fallback) {
    const char *at = strstr(body, key);
    if (!at) return fallback;
    at += strlen(key);
    while (*at == ' ' || *at == ':') at++;
    return atoi(at);
}

static int send_token(struct conn *c) {
    char json[512];
    int k = ++c->sent;
    const char *finish = k == c->tokens ? "\"length\"" : "null";
    if (c->usage_each)
        snprintf(json, sizeof json,
                 "{\"id\":\"cmpl-paced\",\"object\":\"text_completion\",\"model\":\"paced\","
                 "\"choices\":[{\"index\":0,\"text\":\" x\",\"logprobs\":null,"
                 "\"finish_reason\":%s}],\"usage\":{\"prompt_tokens\":8,"
                 "\"completion_tokens\":%d,\"total_tokens\":%d}}",
                 finish, k, k + 8);
    else
        snprintf(json, sizeof json,
                 "{\"id\":\"cmpl-paced\",\"object\":\"text_completion\",\"model\":\"paced\","
                 "\"choices\":[{\"index\":0,\"text\":\" x\",\"logprobs\":null,"
                 "\"finish_reason\":%s}]}",
                 finish);
    if (emit_event(c, json)) return -1;
    record_gap(c, now_ns());
    if (k < c->tokens) return 0;
    if (c->usage_end) {
        snprintf(json, sizeof json,
                 "{\"id\":\"cmpl-paced\",\"object\":\"text_completion\",\"model\":\"paced\","
                 "\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":%d,"
                 "\"total_tokens\":%d}}",
                 k, k + 8);
        if (emit_event(c, json)) return -1;
    }
    if (emit_event(c, "[DONE]")) return -1;
    c->streaming = 0;
    return emit(c, "0\r\n\r\n", 5);
}

/* Parse every complete request in the input buffer. */
static int take_requests(struct conn *c) {
    for (;;) {
        if (c->streaming) return 0; /* pipelined requests wait for the stream to end */
        c->in[c->in_len] = 0;
        char *end = strstr(c->in, "\r\n\r\n");
        if (!end) return 0;
        size_t head = (size_t)(end - c->in) + 4;
        int length = int_after(c->in, "Content-Length", -1);
        if (length < 0) length = int_after(c->in, "content-length", 0);
        if (c->in_len < head + (size_t)length) return 0;
        char *body = c->in + head;
        char saved = body[length];
        body[length] = 0;
        if (strncmp(c->in, "POST", 4) == 0) {
            c->tokens = int_after(body, "\"max_tokens\"", int_after(body, "\"n_predict\"", 16));
            if (c->tokens < 1) c->tokens = 1;
            c->usage_each = strstr(body, "continuous_usage_stats\": true") != NULL ||
                            strstr(body, "continuous_usage_stats\":true") != NULL;
            c->usage_end = strstr(body, "include_usage\": true") != NULL ||
                           strstr(body, "include_usage\":true") != NULL;
            c->sent = 0;
            c->streaming = 1;
            c->start_ns = now_ns();
            static const char head_ok[] =
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n";
            if (emit(c, head_ok, sizeof head_ok - 1)) return -1;
        } else {
            static const char ok[] =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 41\r\n\r\n"
                "{\"object\":\"list\",\"data\":[{\"id\":\"paced\"}]}";
            if (emit(c, ok, sizeof ok - 1)) return -1;
        }
        body[length] = saved;
        size_t used = head + (size_t)length;
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
    }
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s PORT GAP_US [GAPS_FILE]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4) {
        gaps_cap = 1 << 20;
        gaps_us = malloc(gaps_cap * sizeof *gaps_us);
    }
    /* No SA_RESTART: the wait returns, and the loop sees that it is asked to stop. */
    struct sigaction term = {.sa_handler = on_term};
    sigaction(SIGTERM, &term, NULL);
    gap_ns = atoll(argv[2]) * 1000LL;
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 1024)) {
        perror("bind/listen");
        return 1;
    }
    epfd = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &lev);
    struct epoll_event events[256];
    while (!stopping) {
        /* Sleep until the earliest token is due (or input arrives). */
        long long now = now_ns(), earliest = -1;
        for (int fd = 0; fd <= top_fd; fd++) {
            struct conn *c = conns[fd];
            if (!c || !c->streaming || c->out_len) continue;
            long long due = c->start_ns + (long long)(c->sent + 1) * gap_ns;
            if (earliest < 0 || due < earliest) earliest = due;
        }
        struct timespec wait = {0, 0}, *timeout = NULL;
        if (earliest >= 0) {
            long long left = earliest > now ? earliest - now : 0;
            wait.tv_sec = left / 1000000000LL;
            wait.tv_nsec = left % 1000000000LL;
            timeout = &wait;
        }
        int ready = epoll_pwait2(epfd, events, 256, timeout, NULL);
        if (ready < 0) continue; /* a signal: stopping, or not */
        for (int i = 0; i < ready; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (client >= MAX_CONNS) {
                        close(client);
                        continue;
                    }
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *c = calloc(1, sizeof *c);
                    c->fd = client;
                    if (client > top_fd) top_fd = client;
                    conns[client] = c;
                    struct epoll_event ev = {.events = EPOLLIN, .data.fd = client};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, client, &ev);
                }
                continue;
            }
            struct conn *c = conns[fd];
            if (!c) continue;
            if (events[i].events & EPOLLOUT) {
                if (emit(c, "", 0)) {
                    close_conn(c);
                    continue;
                }
                if (!c->out_len) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
                    epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
                }
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (c->in_cap - c->in_len < IN_CHUNK + 1) {
                    c->in_cap = c->in_cap ? 2 * c->in_cap : 2 * IN_CHUNK;
                    c->in = realloc(c->in, c->in_cap);
                }
                ssize_t n = read(fd, c->in + c->in_len, c->in_cap - 1 - c->in_len);
                if (n <= 0 && !(n < 0 && errno == EAGAIN)) {
                    close_conn(c);
                    continue;
                }
                if (n > 0) c->in_len += (size_t)n;
                if (take_requests(c)) close_conn(c);
            }
        }
        /* Send every token that is due: one event per write. */
        now = now_ns();
        for (int fd = 0; fd <= top_fd; fd++) {
            struct conn *c = conns[fd];
            if (!c || !c->streaming || c->out_len) continue;
            if (c->start_ns + (long long)(c->sent + 1) * gap_ns > now) continue;
            if (send_token(c) || (!c->streaming && take_requests(c))) close_conn(c);
        }
    }
    return argc == 4 ? dump_gaps(argv[3]) : 0;
}
