/* A small SSE server for bench_client.py: vLLM's OpenAI chat stream, as fast as the socket takes
 * or paced in decode steps, on one thread (epoll), so the server is never what a bench measures.
 *
 * Built by bench_client.py with gcc into a temporary folder; not part of the package.
 *
 *   sse_server PORT TOKENS STEP_US TOKENS_PER_STEP LOGPATH
 *
 * PORT 0 picks a free port; the server prints "PORT n" once it listens. Every request (one per
 * connection at a time, keep-alive) gets a chunked text/event-stream body as vLLM writes it:
 * a role chunk, TOKENS content chunks (max_tokens from the request body wins) — the last one with
 * finish_reason "length" — a usage chunk and [DONE], each event in its own HTTP chunk.
 * STEP_US = 0 writes it all as fast as the client reads; otherwise, like vLLM, the headers go out at
 * once and the role chunk with the first token after a prefill of PREFILL_STEPS steps, then every
 * STEP_US each streaming request gets TOKENS_PER_STEP more chunks in one write (a decode step).
 *
 * SIGUSR1 prints "STATS chunks requests cpu_ns mono_ns" (content chunks handed to the kernel,
 * requests finished, this process's CPU time, CLOCK_MONOTONIC). SIGTERM flushes LOGPATH (one line
 * per request: "id recv_ns first_ns", CLOCK_MONOTONIC when the request arrived — the kernel's stamp
 * (SO_TIMESTAMPNS) of its last bytes, else when it was read — and just before the write that
 * carried its first content chunk; the same clock as Python's perf_counter_ns) and exits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MODEL "meta-llama/Llama-3.1-8B-Instruct"
#define IN_CAP 65536
#define HIGH_WATER (256 * 1024)
#define PREFILL_STEPS 2

/* Token texts as JSON string bodies: mostly plain, some with escapes and multi-byte UTF-8. */
static const char *TOKS[] = {
    " the", " model", " answer", " is", " a", " capacity", " of", " tokens", " per", " second",
    " and", " we", " measure", " it", ",", " with", " care", ".", " In", " practice", " the",
    " server", " streams", " one", " chunk", " per", " token", "\\n", " caf\xc3\xa9", " to", " be",
    " sure", ":", " \\\"quoted\\\"", " GPU", " memory", " grows", " with", " the", " batch", " size",
    "\\n\\n", " so", " that", " \xe6\x97\xa5\xe6\x9c\xac", " latency", " rises", " under", " load",
    " while", " throughput", " saturates", " at", " the", " knee", "1", "2", "3", " def", " f",
    "(x", "):", "\\n   ", " return",
};
#define NTOKS ((int)(sizeof(TOKS) / sizeof(TOKS[0])))

typedef struct conn {
    int fd;
    char in[IN_CAP];
    size_t in_len;
    char *out;
    size_t out_len, out_off, out_cap;
    int streaming;   /* a response is being generated */
    int tok_i, tok_n;
    int want_out;    /* EPOLLOUT registered */
    int first_pending; /* token 0 is in `out` and not written yet */
    char id[64];
    int id_len;
    long long t_recv, t_first;
    long long arrived; /* kernel arrival of the last bytes read (CLOCK_MONOTONIC), 0 = none */
    int prompt;
    int prefill; /* paced: steps before the first token */
    struct conn *next_active, *prev_active;
    int in_active;
} conn;

static int epfd;
static long long step_ns;
static int per_step = 1;
static int default_tokens = 256;
static unsigned long long chunks, requests, id_seq;
static volatile sig_atomic_t want_stats, want_exit;
static FILE *logf;
static conn *active_head;
static long long created;

static long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long real_minus_mono(void) {
    struct timespec r, m;
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m);
    return ((long long)r.tv_sec - m.tv_sec) * 1000000000LL + (r.tv_nsec - m.tv_nsec);
}

static long long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void on_signal(int sig) {
    if (sig == SIGUSR1) want_stats = 1;
    else want_exit = 1;
}

static void reserve(conn *c, size_t more) {
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    if (c->out_len + more <= c->out_cap) return;
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
        if (c->out_len + more <= c->out_cap) return;
    }
    size_t cap = c->out_cap ? c->out_cap : 65536;
    while (c->out_len + more > cap) cap *= 2;
    c->out = realloc(c->out, cap);
    if (!c->out) { perror("realloc"); exit(1); }
    c->out_cap = cap;
}

/* One SSE event as one HTTP chunk: "<hex>\r\n<event>\r\n". */
static void put_event(conn *c, const char *ev, int n) {
    reserve(c, (size_t)n + 16);
    c->out_len += (size_t)sprintf(c->out + c->out_len, "%x\r\n", n);
    memcpy(c->out + c->out_len, ev, (size_t)n);
    c->out_len += (size_t)n;
    memcpy(c->out + c->out_len, "\r\n", 2);
    c->out_len += 2;
}

static void put_token(conn *c) {
    char ev[512];
    int i = c->tok_i;
    const char *fin = i == c->tok_n - 1 ? "\"length\",\"stop_reason\":null" : "null";
    int n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"%.*s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":\"" MODEL
                     "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
                     c->id_len, c->id, created, TOKS[(i * 7 + c->prompt) % NTOKS], fin);
    put_event(c, ev, n);
    if (i == 0) c->first_pending = 1;
    c->tok_i++;
    chunks++;
}

static void put_tail(conn *c) {
    char ev[512];
    int n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"%.*s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":\"" MODEL
                     "\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n",
                     c->id_len, c->id, created, c->prompt, c->prompt + c->tok_n, c->tok_n);
    put_event(c, ev, n);
    put_event(c, "data: [DONE]\n\n", 14);
    reserve(c, 5);
    memcpy(c->out + c->out_len, "0\r\n\r\n", 5);
    c->out_len += 5;
    c->streaming = 0;
    requests++;
    if (c->first_pending) { /* a short stream generated whole before its first write */
        c->t_first = mono_ns();
        c->first_pending = 0;
    }
    if (logf) fprintf(logf, "%.*s %lld %lld\n", c->id_len, c->id, c->t_recv, c->t_first);
}

static void set_out(conn *c, int on) {
    if (c->want_out == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

static void activate(conn *c, int on) {
    if (on == c->in_active) return;
    if (on) {
        c->next_active = active_head;
        c->prev_active = NULL;
        if (active_head) active_head->prev_active = c;
        active_head = c;
    } else {
        if (c->prev_active) c->prev_active->next_active = c->next_active;
        else active_head = c->next_active;
        if (c->next_active) c->next_active->prev_active = c->prev_active;
    }
    c->in_active = on;
}

static void close_conn(conn *c) {
    activate(c, 0);
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->out);
    free(c);
}

/* Write what is pending; 0 = fine (maybe partial), -1 = the connection is gone. */
static int flush_out(conn *c) {
    while (c->out_off < c->out_len) {
        if (c->first_pending) {
            c->t_first = mono_ns();
            c->first_pending = 0;
        }
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) { set_out(c, 1); return 0; }
            if (errno == EINTR) continue;
            return -1;
        }
        c->out_off += (size_t)w;
    }
    c->out_off = c->out_len = 0;
    set_out(c, 0);
    return 0;
}

static int try_request(conn *c);
static void put_role(conn *c);

/* Fast mode: generate while the socket takes it. */
static int pump(conn *c) {
    for (;;) {
        while (c->streaming && c->out_len - c->out_off < HIGH_WATER) {
            if (c->tok_i < c->tok_n) put_token(c);
            else put_tail(c);
        }
        if (flush_out(c) < 0) return -1;
        if (c->out_off < c->out_len) return 0; /* the socket is full: wait for EPOLLOUT */
        if (!c->streaming) return try_request(c);
    }
}

/* A complete request in c->in starts a response; 0 = fine, -1 = close. */
static int try_request(conn *c) {
    if (c->streaming) return 0;
    c->in[c->in_len < IN_CAP ? c->in_len : IN_CAP - 1] = 0;
    char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
    if (!end) return c->in_len >= IN_CAP - 1 ? -1 : 0;
    size_t head = (size_t)(end - c->in) + 4;
    long clen = 0;
    for (char *p = c->in; p < end; p++) {
        if ((p == c->in || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) clen = strtol(p + 15, NULL, 10);
    }
    if (clen < 0 || head + (size_t)clen > IN_CAP - 1) return -1;
    if (c->in_len < head + (size_t)clen) return 0;
    c->t_recv = mono_ns();
    if (c->arrived > 0 && c->arrived < c->t_recv) c->t_recv = c->arrived;
    c->tok_n = default_tokens;
    char save = c->in[head + clen];
    c->in[head + clen] = 0;
    char *mt = strstr(c->in + head, "\"max_tokens\":");
    if (mt) {
        long v = strtol(mt + 13, NULL, 10);
        if (v > 0 && v < 1000000) c->tok_n = (int)v;
    }
    c->in[head + clen] = save;
    c->prompt = 10 + (int)(clen % 50);
    memmove(c->in, c->in + head + clen, c->in_len - head - (size_t)clen);
    c->in_len -= head + (size_t)clen;
    id_seq++;
    c->id_len = snprintf(c->id, sizeof c->id, "chatcmpl-%016llx%016llx", 0x9e3779b97f4a7c15ULL * id_seq, id_seq);
    c->tok_i = 0;
    c->t_first = 0;
    c->streaming = 1;
    static const char hdr[] =
        "HTTP/1.1 200 OK\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\nserver: uvicorn\r\n"
        "content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n";
    reserve(c, sizeof hdr);
    memcpy(c->out + c->out_len, hdr, sizeof hdr - 1);
    c->out_len += sizeof hdr - 1;
    if (step_ns > 0) { /* like vLLM: the headers now, the role chunk with the first token after a prefill */
        c->prefill = PREFILL_STEPS;
        activate(c, 1);
        return flush_out(c);
    }
    put_role(c);
    return pump(c);
}

static void put_role(conn *c) {
    char ev[512];
    int n = snprintf(ev, sizeof ev,
                     "data: {\"id\":\"%.*s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":\"" MODEL
                     "\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                     "\"finish_reason\":null}]}\n\n",
                     c->id_len, c->id, created);
    put_event(c, ev, n);
}

static void on_step(void) {
    conn *c = active_head;
    while (c) {
        conn *next = c->next_active;
        if (c->prefill > 0 && --c->prefill > 0) {
            c = next;
            continue;
        }
        if (c->tok_i == 0) put_role(c);
        for (int k = 0; k < per_step && c->streaming; k++) {
            if (c->tok_i < c->tok_n) put_token(c);
            if (c->tok_i >= c->tok_n) put_tail(c);
        }
        int rc = flush_out(c);
        if (rc == 0 && !c->streaming) {
            activate(c, 0);
            rc = try_request(c);
        }
        if (rc < 0) close_conn(c);
        c = next;
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s PORT TOKENS STEP_US TOKENS_PER_STEP LOGPATH\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    default_tokens = atoi(argv[2]);
    step_ns = atoll(argv[3]) * 1000LL;
    per_step = atoi(argv[4]);
    if (strcmp(argv[5], "-") != 0) {
        logf = fopen(argv[5], "w");
        if (!logf) { perror("log"); return 1; }
        setvbuf(logf, NULL, _IOFBF, 1 << 20);
    }
    created = (long long)time(NULL);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                               .sin_addr.s_addr = htonl(0x7f000001)};
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 8192) < 0) { perror("listen"); return 1; }
    socklen_t alen = sizeof addr;
    getsockname(ls, (struct sockaddr *)&addr, &alen);
    printf("PORT %d\n", ntohs(addr.sin_port));
    fflush(stdout);

    epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, ls, &ev);
    int tfd = -1;
    static int tmark;
    if (step_ns > 0) {
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
        struct itimerspec its = {.it_interval = {step_ns / 1000000000LL, step_ns % 1000000000LL},
                                 .it_value = {step_ns / 1000000000LL, step_ns % 1000000000LL}};
        timerfd_settime(tfd, 0, &its, NULL);
        struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &tmark};
        epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &tev);
    }
    struct epoll_event evs[256];
    while (!want_exit) {
        if (want_stats) {
            want_stats = 0;
            printf("STATS %llu %llu %lld %lld\n", chunks, requests, cpu_ns(), mono_ns());
            fflush(stdout);
        }
        int n = epoll_wait(epfd, evs, 256, 200);
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == NULL) {
                for (;;) {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0) break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
                    conn *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            if (p == &tmark) {
                unsigned long long ticks;
                if (read(tfd, &ticks, sizeof ticks) > 0) on_step();
                continue;
            }
            conn *c = p;
            int rc = 0;
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                /* recvmsg: the kernel's arrival stamp of the request, so a server delayed by other
                 * processes on its core does not move its own "request read" time */
                struct iovec iov = {.iov_base = c->in + c->in_len, .iov_len = IN_CAP - 1 - c->in_len};
                char cbuf[CMSG_SPACE(sizeof(struct timespec))];
                struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                                     .msg_controllen = sizeof cbuf};
                ssize_t r = recvmsg(c->fd, &msg, 0);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) { close_conn(c); continue; }
                if (r > 0) {
                    c->in_len += (size_t)r;
                    c->arrived = 0;
                    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                            struct timespec ts;
                            memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                            c->arrived = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec - real_minus_mono();
                        }
                    }
                }
                rc = try_request(c);
            }
            if (rc == 0 && (evs[i].events & EPOLLOUT)) {
                rc = step_ns == 0 ? pump(c) : flush_out(c);
            }
            if (rc < 0) close_conn(c);
        }
    }
    printf("STATS %llu %llu %lld %lld\n", chunks, requests, cpu_ns(), mono_ns());
    fflush(stdout);
    if (logf) fclose(logf);
    return 0;
}
