/* Embree's ray packets for goggles' camera rays and the sun's shadow rays (goggles.render.embree).

   embreex, the Python binding goggles installs Embree with, traces one ray per call (rtcIntersect1).
   A camera's rays are coherent: neighbouring pixels cross the same BVH nodes. Traced sixteen at a
   time (a 4 x 4 block of pixels: rtcIntersect16), Embree tests each node once for the packet, in SIMD.

   This file declares the few functions of Embree 4's C API it calls (the library embreex's wheel
   ships, found by goggles and named to the linker: no Embree headers are needed) and is built once
   with the system's C compiler into goggles' cache. Without a compiler, goggles traces with embreex's
   single rays, as before. */

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct RTCDeviceTy *RTCDevice;
typedef struct RTCSceneTy *RTCScene;
typedef struct RTCGeometryTy *RTCGeometry;

/* Embree 4's enums, by value (rtcore_common.h, rtcore_geometry.h, rtcore_buffer.h). */
enum { GEOMETRY_TYPE_TRIANGLE = 0 };
enum { BUFFER_TYPE_INDEX = 0, BUFFER_TYPE_VERTEX = 1 };
enum { FORMAT_UINT3 = 0x5003, FORMAT_FLOAT3 = 0x9003 };
#define INVALID_ID 0xFFFFFFFFu

RTCDevice rtcNewDevice(const char *config);
void rtcReleaseDevice(RTCDevice device);
int rtcGetDeviceError(RTCDevice device);
RTCScene rtcNewScene(RTCDevice device);
void rtcReleaseScene(RTCScene scene);
void rtcCommitScene(RTCScene scene);
RTCGeometry rtcNewGeometry(RTCDevice device, int type);
void rtcSetSharedGeometryBuffer(RTCGeometry geometry, int type, unsigned int slot, int format, const void *ptr,
                                size_t byte_offset, size_t byte_stride, size_t count);
void rtcCommitGeometry(RTCGeometry geometry);
unsigned int rtcAttachGeometry(RTCScene scene, RTCGeometry geometry);
void rtcReleaseGeometry(RTCGeometry geometry);

#define LANES 16

/* RTCRayHit16 in Embree 4's layout (rtcore_ray.h): the ray, then the hit. The hit ends with the
   instance IDs, as many levels as the library was built for (and their primitive IDs with instance
   arrays): room for eight levels of both keeps the library's writes inside this packet whatever it is. */
struct __attribute__((aligned(64))) Packet {
    float org_x[LANES], org_y[LANES], org_z[LANES], tnear[LANES];
    float dir_x[LANES], dir_y[LANES], dir_z[LANES], time[LANES];
    float tfar[LANES];
    unsigned int mask[LANES], id[LANES], flags[LANES];
    float ng_x[LANES], ng_y[LANES], ng_z[LANES];
    float u[LANES], v[LANES];
    unsigned int prim_id[LANES], geom_id[LANES];
    unsigned int instances[16][LANES];
};

void rtcIntersect16(const int *valid, RTCScene scene, struct Packet *rayhit, void *arguments);
/* RTCRay16's layout is the packet's first twelve arrays: rtcOccluded16 reads the ray and sets tfar to
   -inf where something lies within it. */
void rtcOccluded16(const int *valid, RTCScene scene, struct Packet *ray, void *arguments);

struct Tracer {
    RTCDevice device;
    RTCScene scene;
};

/* An Embree scene over triangles (vertices (nv, 3) float32, faces (nf, 3) uint32, both kept alive by
   the caller: Embree shares them); NULL and Embree's error code in *error when it cannot be made. */
void *goggles_embree_new(const float *vertices, long nv, const unsigned int *faces, long nf, int *error) {
    struct Tracer *tracer = calloc(1, sizeof(struct Tracer));
    *error = 0;
    if (tracer == NULL) {
        *error = -1;
        return NULL;
    }
    tracer->device = rtcNewDevice(NULL);
    if (tracer->device == NULL) {
        *error = -2;
        free(tracer);
        return NULL;
    }
    tracer->scene = rtcNewScene(tracer->device);
    RTCGeometry mesh = rtcNewGeometry(tracer->device, GEOMETRY_TYPE_TRIANGLE);
    rtcSetSharedGeometryBuffer(mesh, BUFFER_TYPE_VERTEX, 0, FORMAT_FLOAT3, vertices, 0, 3 * sizeof(float),
                               (size_t)nv);
    rtcSetSharedGeometryBuffer(mesh, BUFFER_TYPE_INDEX, 0, FORMAT_UINT3, faces, 0, 3 * sizeof(unsigned int),
                               (size_t)nf);
    rtcCommitGeometry(mesh);
    rtcAttachGeometry(tracer->scene, mesh);
    rtcReleaseGeometry(mesh);
    rtcCommitScene(tracer->scene);
    *error = rtcGetDeviceError(tracer->device);
    if (*error != 0) {
        rtcReleaseScene(tracer->scene);
        rtcReleaseDevice(tracer->device);
        free(tracer);
        return NULL;
    }
    return tracer;
}

void goggles_embree_free(void *handle) {
    struct Tracer *tracer = handle;
    if (tracer == NULL)
        return;
    rtcReleaseScene(tracer->scene);
    rtcReleaseDevice(tracer->device);
    free(tracer);
}

/* The rays of the 4 x 4 block at row r0, column x0 of rows x width rays laid out row by row, into a
   packet: valid[lane] -1 for a live ray (inside, reach > 0), index[lane] its ray (-1: past the edge).
   origins: (rows * width, 3), or one origin for all when one_origin. Returns whether any is live. */
static inline int fill_block(struct Packet *packet, int *valid, long *index, const float *origins, int one_origin,
                             const float *directions, const float *reach, long rows, long width, long r0, long x0) {
    int any = 0;
    for (int lane = 0; lane < LANES; lane++) {
        long r = r0 + lane / 4, x = x0 + lane % 4;
        long i = r * width + x;
        int inside = r < rows && x < width;
        int live = inside && reach[i] > 0.0f;
        valid[lane] = live ? -1 : 0;
        index[lane] = inside ? i : -1;
        any |= live;
        const float *o = origins + (one_origin ? 0 : 3 * (live ? i : 0));
        const float *d = directions + 3 * (live ? i : 0);
        packet->org_x[lane] = o[0];
        packet->org_y[lane] = o[1];
        packet->org_z[lane] = o[2];
        packet->dir_x[lane] = live ? d[0] : 0.0f;
        packet->dir_y[lane] = live ? d[1] : 0.0f;
        packet->dir_z[lane] = live ? d[2] : 1.0f;
        packet->tnear[lane] = 0.0f;
        packet->tfar[lane] = live ? reach[i] : 0.0f;
        packet->time[lane] = 0.0f;
        packet->mask[lane] = 0xFFFFFFFFu;
        packet->id[lane] = (unsigned int)lane;
        packet->flags[lane] = 0;
    }
    return any;
}

/* Closest hits of rows x width rays laid out row by row (a chunk of a camera's rows), traced in
   4 x 4 blocks. origins: (rows * width, 3), or one origin for all when one_origin; directions (rows *
   width, 3); reach (rows * width) the farthest distance of each ray (0: no ray), lowered to the hit's.
   face (-1: none), u, v (Embree's barycentrics) and normal (the unnormalised geometric normal, 3 per
   ray) are written where not NULL. */
void goggles_embree_trace(void *handle, const float *origins, int one_origin, const float *directions, float *reach,
                          long rows, long width, int *face, float *u, float *v, float *normal) {
    struct Tracer *tracer = handle;
    struct Packet packet;
    int valid[LANES];
    long index[LANES];
    for (long r0 = 0; r0 < rows; r0 += 4) {
        for (long x0 = 0; x0 < width; x0 += 4) {
            int any = fill_block(&packet, valid, index, origins, one_origin, directions, reach, rows, width, r0, x0);
            for (int lane = 0; lane < LANES; lane++) {
                packet.geom_id[lane] = INVALID_ID;
                packet.prim_id[lane] = INVALID_ID;
                if (index[lane] >= 0 && !valid[lane] && face != NULL)
                    face[index[lane]] = -1; /* no ray: no hit */
            }
            if (!any)
                continue;
            rtcIntersect16(valid, tracer->scene, &packet, NULL);
            for (int lane = 0; lane < LANES; lane++) {
                long i = index[lane];
                if (i < 0 || !valid[lane])
                    continue;
                int hit = packet.geom_id[lane] != INVALID_ID;
                if (hit)
                    reach[i] = packet.tfar[lane];
                if (face != NULL)
                    face[i] = hit ? (int)packet.prim_id[lane] : -1;
                if (u != NULL && hit) {
                    u[i] = packet.u[lane];
                    v[i] = packet.v[lane];
                }
                if (normal != NULL && hit) {
                    normal[3 * i] = packet.ng_x[lane];
                    normal[3 * i + 1] = packet.ng_y[lane];
                    normal[3 * i + 2] = packet.ng_z[lane];
                }
            }
        }
    }
}

/* Is anything within reach of each of rows x width rays (laid out as in goggles_embree_trace, traced
   in 4 x 4 blocks)? reach 0: no ray. The sun's shadow rays of neighbouring pixels: one direction,
   nearby origins. blocked[i], where not NULL, is 1 where something is, 0 where nothing is or there is
   no ray; where dark and rgb are not NULL, a blocked ray's pixel takes its colour in shadow: the three
   bytes of dark over those of rgb (both rows * width * 3). */
void goggles_embree_occluded(void *handle, const float *origins, const float *directions, const float *reach,
                             long rows, long width, signed char *blocked, const unsigned char *dark,
                             unsigned char *rgb) {
    struct Tracer *tracer = handle;
    struct Packet packet;
    int valid[LANES];
    long index[LANES];
    for (long r0 = 0; r0 < rows; r0 += 4) {
        for (long x0 = 0; x0 < width; x0 += 4) {
            int any = fill_block(&packet, valid, index, origins, 0, directions, reach, rows, width, r0, x0);
            for (int lane = 0; lane < LANES && blocked != NULL; lane++)
                if (index[lane] >= 0)
                    blocked[index[lane]] = 0;
            if (!any)
                continue;
            rtcOccluded16(valid, tracer->scene, &packet, NULL);
            for (int lane = 0; lane < LANES; lane++) {
                long i = index[lane];
                if (i < 0 || !valid[lane] || packet.tfar[lane] >= 0.0f)
                    continue;
                if (blocked != NULL)
                    blocked[i] = 1;
                if (dark != NULL && rgb != NULL)
                    memcpy(rgb + 3 * i, dark + 3 * i, 3);
            }
        }
    }
}
