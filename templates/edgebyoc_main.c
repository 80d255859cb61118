/* Harness of a deployable edgebyoc network (generated project): reads each input from a raw
 * binary file, runs the network once, writes each output as a raw binary file.
 *
 *   usage: ./network in0.bin [in1.bin ...] out0.bin [out1.bin ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include "network.h"

static int read_file(const char* path, void* data, size_t bytes) {
  FILE* f = fopen(path, "rb");
  size_t got;
  if (f == NULL) { fprintf(stderr, "cannot open %s\n", path); return 1; }
  got = fread(data, 1, bytes, f);
  if (got != bytes || fgetc(f) != EOF) {
    fprintf(stderr, "%s: expected exactly %lu bytes\n", path, (unsigned long)bytes);
    fclose(f);
    return 1;
  }
  fclose(f);
  return 0;
}

static int write_file(const char* path, const void* data, size_t bytes) {
  FILE* f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, bytes, f) != bytes) {
    fprintf(stderr, "cannot write %s\n", path);
    if (f != NULL) fclose(f);
    return 1;
  }
  return fclose(f) != 0;
}

int main(int argc, char** argv) {
  static const size_t in_bytes[] = EDGEBYOC_INPUT_BYTES_LIST;
  static const size_t out_bytes[] = EDGEBYOC_OUTPUT_BYTES_LIST;
  void* inputs[EDGEBYOC_NETWORK_INPUTS];
  void* outputs[EDGEBYOC_NETWORK_OUTPUTS];
  int i, status = 0;
  if (argc != 1 + EDGEBYOC_NETWORK_INPUTS + EDGEBYOC_NETWORK_OUTPUTS) {
    fprintf(stderr, "usage: %s <%d input files> <%d output files>\n", argv[0],
            EDGEBYOC_NETWORK_INPUTS, EDGEBYOC_NETWORK_OUTPUTS);
    return 2;
  }
#ifdef EDGEBYOC_NETWORK_IO_IN_ARENA
  /* inputs and outputs live in the network's arena: read and write them in place */
  for (i = 0; i < EDGEBYOC_NETWORK_INPUTS; ++i) {
    inputs[i] = edgebyoc_network_input(i);
    if (read_file(argv[1 + i], inputs[i], in_bytes[i])) return 1;
  }
  for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i) outputs[i] = edgebyoc_network_output(i);
#else
  for (i = 0; i < EDGEBYOC_NETWORK_INPUTS; ++i) {
    inputs[i] = malloc(in_bytes[i]);
    if (inputs[i] == NULL || read_file(argv[1 + i], inputs[i], in_bytes[i])) return 1;
  }
  for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i) {
    outputs[i] = malloc(out_bytes[i]);
    if (outputs[i] == NULL) return 1;
  }
#endif
  status = edgebyoc_network_run((const void* const*)inputs, outputs);
  if (status != 0) {
    fprintf(stderr, "edgebyoc_network_run failed at step %d\n", status);
    return 1;
  }
  for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i)
    status |= write_file(argv[1 + EDGEBYOC_NETWORK_INPUTS + i], outputs[i], out_bytes[i]);
#ifndef EDGEBYOC_NETWORK_IO_IN_ARENA
  for (i = 0; i < EDGEBYOC_NETWORK_INPUTS; ++i) free(inputs[i]);
  for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i) free(outputs[i]);
#endif
  return status;
}
