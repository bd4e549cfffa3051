/*
 * The transfer engine from C: two engines in this process (tcp between them), memory
 * allocated by one and exported to peers, a write and a read by the other, a batch of reads,
 * and a write in callback form.
 *
 *   make -C examples/c && examples/c/engine
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yuebing.h"

#define CHECK(call)                                                                 \
    do {                                                                            \
        int32_t rc_ = (call);                                                       \
        if (rc_ != YUEBING_OK) {                                                    \
            fprintf(stderr, "%s:%d: %s: %s (%d): %s\n", __FILE__, __LINE__, #call,  \
                    yuebing_error_name(rc_), rc_, yuebing_last_error_message());    \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define EXPECT(cond)                                                                \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);     \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define LEN (1u << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static int finished = 0;
static int32_t last_code = 1;

static void on_done(void *user_data, int32_t code, const char *message) {
    (void)user_data;
    (void)message;
    pthread_mutex_lock(&lock);
    last_code = code;
    finished = 1;
    pthread_cond_signal(&done);
    pthread_mutex_unlock(&lock);
}

int main(void) {
    yuebing_bridge_t bridge = 0;
    CHECK(yuebing_bridge_new(NULL, &bridge, NULL));
    yuebing_engine_config tcp = {0};
    tcp.transport = YUEBING_TRANSPORT_TCP;
    yuebing_engine_t a = 0, b = 0;
    CHECK(yuebing_engine_new(bridge, &tcp, &a, NULL));
    CHECK(yuebing_engine_new(bridge, NULL, &b, NULL));

    /* b exports 1 MiB that peers may read and write; a has 1 MiB of its own. */
    uint64_t target = 0, local = 0;
    CHECK(yuebing_engine_allocate(b, LEN, YUEBING_ACCESS_READ_WRITE, &target, NULL));
    CHECK(yuebing_engine_allocate(a, LEN, YUEBING_ACCESS_LOCAL_ONLY, &local, NULL));
    unsigned char *mine = (unsigned char *)(uintptr_t)local;
    for (unsigned i = 0; i < 4096; i++) mine[i] = (unsigned char)(i * 7);

    char name[256];
    size_t name_len = 0;
    CHECK(yuebing_engine_name(b, name, sizeof name, &name_len, NULL));
    uint64_t segment = 0;
    CHECK(yuebing_engine_open_segment(a, name, &segment, NULL));

    /* A write to b, then a read back into another part of a's memory. */
    CHECK(yuebing_engine_write(a, local, segment, target + 8192, 4096, NULL));
    CHECK(yuebing_engine_read(a, local + 65536, segment, target + 8192, 4096, NULL));
    EXPECT(memcmp(mine, mine + 65536, 4096) == 0);

    /* A batch of eight reads. */
    yuebing_batch_t batch = 0;
    CHECK(yuebing_batch_new(a, 8, &batch, NULL));
    yuebing_request requests[8];
    for (int i = 0; i < 8; i++) {
        requests[i].opcode = YUEBING_OP_READ;
        requests[i].source = local + (uint64_t)(i + 1) * 4096;
        requests[i].segment = segment;
        requests[i].target_offset = target + 8192;
        requests[i].length = 4096;
    }
    uint64_t first = 99;
    CHECK(yuebing_batch_submit(batch, requests, 8, &first, NULL));
    yuebing_batch_status status;
    CHECK(yuebing_batch_wait(batch, &status, NULL));
    EXPECT(first == 0 && status.state == YUEBING_TASK_COMPLETED && status.completed == 8);
    EXPECT(status.bytes == 8 * 4096);
    CHECK(yuebing_batch_free(batch, NULL));
    for (int i = 1; i <= 8; i++) EXPECT(memcmp(mine, mine + i * 4096, 4096) == 0);

    /* A write in callback form: the callback comes once the bytes landed. */
    CHECK(yuebing_engine_write_async(a, local, segment, target + 131072, 4096, on_done, NULL,
                                     NULL, NULL));
    pthread_mutex_lock(&lock);
    while (!finished) pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
    EXPECT(last_code == YUEBING_OK);
    EXPECT(memcmp(mine, (unsigned char *)(uintptr_t)target + 131072, 4096) == 0);

    /* Out of bounds is a typed error. */
    yuebing_error err;
    int32_t rc = yuebing_engine_write(a, local, segment, target + LEN - 10, 4096, &err);
    EXPECT(rc == YUEBING_ERR_OUT_OF_BOUNDS && err.code == rc);

    CHECK(yuebing_engine_destroy(a, NULL));
    CHECK(yuebing_engine_destroy(b, NULL));
    CHECK(yuebing_bridge_destroy(bridge, NULL));
    printf("c engine example: ok\n");
    return 0;
}
