/*
 * The store from C: connect to a running master, put and get three objects, read one into a
 * registered buffer, remove them — first with the blocking calls, then with the callback forms.
 *
 *   make -C examples/c && examples/c/store 127.0.0.1:50051
 *
 * (the master and at least one node with store space must be running; `yuebing demo` or
 * `yuebing master` + `yuebing node --store-size 64M` start them). YUEBING_TOKEN is presented
 * when set.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "yuebing.h"

/* Fails the program with the code's name and message when a call does not return 0. */
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

static const char *KEYS[3] = {"c-example/0", "c-example/1", "c-example/2"};
static const char *VALUES[3] = {"the first value", "a second, longer value", "third"};

/* What the callbacks report back to main: a count of finished calls under a lock. */
struct pending {
    pthread_mutex_t lock;
    pthread_cond_t done;
    int finished;
    int failures;
    char got[64];
};

static void finish(struct pending *p, int32_t code, const char *message) {
    pthread_mutex_lock(&p->lock);
    if (code != YUEBING_OK) {
        fprintf(stderr, "callback: %s (%d): %s\n", yuebing_error_name(code), code, message);
        p->failures++;
    }
    p->finished++;
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->lock);
}

static void on_done(void *user_data, int32_t code, const char *message) {
    finish(user_data, code, message);
}

static void on_bytes(void *user_data, int32_t code, const char *message, const uint8_t *data,
                     size_t len) {
    struct pending *p = user_data;
    if (code == YUEBING_OK && len < sizeof p->got) {
        pthread_mutex_lock(&p->lock);
        memcpy(p->got, data, len); /* the bytes are lent only until the callback returns */
        p->got[len] = '\0';
        pthread_mutex_unlock(&p->lock);
    }
    finish(p, code, message);
}

static void on_number(void *user_data, int32_t code, const char *message, uint64_t value) {
    (void)value;
    finish(user_data, code, message);
}

static void wait_for(struct pending *p, int n) {
    pthread_mutex_lock(&p->lock);
    while (p->finished < n) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MASTER_HOST:PORT\n", argv[0]);
        return 2;
    }
    if (yuebing_abi_version() != YUEBING_ABI_VERSION) {
        fprintf(stderr, "library ABI %u, header ABI %u\n", yuebing_abi_version(),
                YUEBING_ABI_VERSION);
        return 1;
    }
    yuebing_error err;
    yuebing_bridge_t bridge = 0;
    CHECK(yuebing_bridge_new(NULL, &bridge, &err));

    yuebing_store_config config = {0};
    config.master = argv[1];
    config.token = getenv("YUEBING_TOKEN");
    config.staging_size = 4 << 20;
    yuebing_store_t store = 0;
    CHECK(yuebing_store_new(bridge, &config, &store, &err));

    /* Blocking: put and get three objects. */
    for (int i = 0; i < 3; i++)
        CHECK(yuebing_store_put(store, KEYS[i], (const uint8_t *)VALUES[i], strlen(VALUES[i]),
                                NULL, &err));
    for (int i = 0; i < 3; i++) {
        yuebing_buf value = {0};
        CHECK(yuebing_store_get(store, KEYS[i], NULL, &value, &err));
        EXPECT(value.len == strlen(VALUES[i]) && memcmp(value.data, VALUES[i], value.len) == 0);
        yuebing_buf_free(&value);
    }
    /* An existing key keeps its typed error; the error struct carries code and message. */
    int32_t rc = yuebing_store_put(store, KEYS[0], (const uint8_t *)"x", 1, NULL, &err);
    EXPECT(rc == YUEBING_ERR_OBJECT_ALREADY_EXISTS && err.code == rc && strlen(err.message) > 0);

    /* Read one into a registered buffer, without a copy through the client. */
    yuebing_engine_t engine = 0;
    CHECK(yuebing_store_engine(store, &engine, &err));
    size_t cap = 4096;
    char *buffer = calloc(1, cap);
    EXPECT(buffer != NULL);
    CHECK(yuebing_engine_register(engine, buffer, cap, "cpu:0", YUEBING_ACCESS_LOCAL_ONLY, &err));
    uint64_t size = 0;
    CHECK(yuebing_store_get_into(store, KEYS[1], (uint64_t)(uintptr_t)buffer, cap, NULL, &size,
                                 &err));
    EXPECT(size == strlen(VALUES[1]) && memcmp(buffer, VALUES[1], size) == 0);
    CHECK(yuebing_engine_unregister(engine, (uint64_t)(uintptr_t)buffer, &err));
    free(buffer); /* unregistered: nothing touches it any more */

    /* Callbacks: a get, an exist and a put in flight at once. */
    struct pending p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, {0}};
    CHECK(yuebing_store_get_async(store, KEYS[2], NULL, on_bytes, &p, NULL, &err));
    CHECK(yuebing_store_exist_async(store, KEYS[0], NULL, on_number, &p, NULL, &err));
    CHECK(yuebing_store_put_async(store, "c-example/3", (const uint8_t *)"four", 4, NULL,
                                  on_done, &p, NULL, &err));
    wait_for(&p, 3);
    EXPECT(p.failures == 0 && strcmp(p.got, VALUES[2]) == 0);

    /* Remove them: three blocking, one by callback. */
    for (int i = 0; i < 3; i++) CHECK(yuebing_store_remove(store, KEYS[i], 1, NULL, &err));
    CHECK(yuebing_store_remove_async(store, "c-example/3", 1, NULL, on_done, &p, NULL, &err));
    wait_for(&p, 4);
    EXPECT(p.failures == 0);
    uint64_t exists = 1;
    CHECK(yuebing_store_exist(store, KEYS[0], NULL, &exists, &err));
    EXPECT(exists == 0);

    CHECK(yuebing_store_close(store, NULL, &err));
    CHECK(yuebing_engine_destroy(engine, &err));
    CHECK(yuebing_store_destroy(store, &err));
    /* A destroyed handle is an error code, never a crash. */
    EXPECT(yuebing_store_destroy(store, &err) == YUEBING_ERR_INVALID_HANDLE);
    CHECK(yuebing_bridge_destroy(bridge, &err));
    printf("c store example: ok\n");
    return 0;
}
