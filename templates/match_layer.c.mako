## MATCH's generic layer template (Hamdi et al., Fig. 3), filled with one layer's geometry, the
## schedule the search found and the module's API names (bound per flavour by a header).
## Context: symbol, module, layer (edgebyoc_layer_t fields), add_params (list or None),
## schedule (tiles / trips indexed K, OY, OX; order as dimension indices of the output loops;
## fill per operand I, W, O as a depth among all loops, the reduction loops included;
## double_buffer; reductions: the tiled reduction loops in loop order (FY, FX, C), innermost,
## with r_tiles / r_trips per reduction dimension: partial sums in an int32 accumulator
## (buffers["acc"] elements) through the binding's kernel_partial, which sees a filter tile
## as a layer of that filter size (edgebyoc_filter_window); r_slice per operand I, W and
## reduction: its buffer holds one tile of it; w_tile_major: the weights in L2 tile by tile,
## w_tile_bytes apart, w_taps x w_channels per output channel),
## buffers (bytes of one L1 buffer per operand), weight_bytes_per_k,
## has_weights, two_inputs, channelwise (each output channel reads only its own input channel),
## planar (image activations in channel planes, NCHW, in L2 and L1), rows_outer (with planar:
## planes cut in rows, rows outermost, NHCW, in L2 and L1), api (generic name -> name in this
## module's binding), description.
## The function computes the whole layer (band NULL) or the band of output rows band->y0..y1
## with the activations in L2 buffers of band->*_ring rows (ring buffers; in NCHW planes,
## each plane holds that many rows).
## resident (weights loaded once, before every loop): the layer defines ${symbol}_resident
## (edgebyoc_resident_t); a band call while its base is set keeps the weights there, the int32
## arrays from resident_offset on, and loads them only once per chain.
<%
    order = schedule["order"]
    depth = len(order)
    reductions = schedule["reductions"]
    r_tiles, r_trips, r_slice = schedule["r_tiles"], schedule["r_trips"], schedule["r_slice"]
    partial = bool(reductions)
    r_total = 1
    for d in reductions:
        r_total *= r_trips[d]
    # every loop for the buffers' fill keys: 0-2 K, OY, OX; 3 C, 4 FY, 5 FX
    loop_codes = list(order) + [{"C": 3, "FY": 4, "FX": 5}[d] for d in reductions]
    depth_all = len(loop_codes)
    iterations = r_total
    for d in order:
        iterations *= schedule["trips"][d]
    double = schedule["double_buffer"]
    fill = schedule["fill"]
    filter_tiled = "FY" in reductions or "FX" in reductions
    def slots(op):
        return 2 if double and fill[op] > 0 else 1
    def block(j, f):
        # the output block of iteration j for a buffer filled at depth f (of all loops)
        outer = j if not partial else f"({j}) / {r_total}"
        return f"edgebyoc_block(L, order, {depth}, trips, tiles, {outer}, {min(f, depth)})"
    def key(j, f):
        return f"edgebyoc_fill_key(loops, {depth_all}, trips_all, {j}, {f})"
    def r_index(j, dim):
        # the tile of reduction loop dim at iteration j (0 when it is not tiled)
        if dim not in reductions:
            return "0"
        inner = 1
        for d in reductions[reductions.index(dim) + 1:]:
            inner *= r_trips[d]
        return f"(((({j}) % {r_total}) / {inner}) % {r_trips[dim]})"
    def window(j, sliced):
        # the layer as the filter taps a buffer (or the kernel) serves at iteration j: one
        # tile of each filter loop in sliced, else the whole filter
        fy = sliced.get("FY", False) and "FY" in reductions
        fx = sliced.get("FX", False) and "FX" in reductions
        if not (fy or fx):
            return "*L"
        fy0, nfy = (f"{r_index(j, 'FY')} * {r_tiles['FY']}", str(r_tiles["FY"])) if fy else ("0", "L->FY")
        fx0, nfx = (f"{r_index(j, 'FX')} * {r_tiles['FX']}", str(r_tiles["FX"])) if fx else ("0", "L->FX")
        return f"edgebyoc_filter_window(L, {fy0}, {nfy}, {fx0}, {nfx})"
    def w_tile(j):
        # the index of the weight buffer's tile in tile-major L2 weights (FY, FX, C order)
        index, scale = "0", 1
        for d in reversed(reductions):
            if r_slice["W"][d]:
                index = f"{index} + {r_index(j, d)} * {scale}"
                scale *= r_trips[d]
        return f"({index})"
%>\
/* ${symbol}: ${description}
 * schedule: tiles K=${schedule["tiles"][0]} OY=${schedule["tiles"][1]} OX=${schedule["tiles"][2]}${"".join(f" {d}={r_tiles[d]}" for d in reductions)}, loops (outer first) ${", ".join([("K", "OY", "OX")[d] for d in order] + reductions) or "none"}, buffers filled at depth I=${fill["I"]} W=${fill["W"]} O=${fill["O"]}, ${"double" if double else "single"} buffering, L1 ${sum(buffers[o] * slots(o) for o in ("I", "W", "O")) + 4 * buffers.get("acc", 0)} bytes${" (int32 partial sums included)" if partial else ""} */
% if add_params is not None:
static const int32_t ${symbol}_add_params[11] = {${", ".join(str(int(v)) for v in add_params)}};
% endif
static const edgebyoc_layer_t ${symbol}_layer = {
  ${layer["kind"]}, ${layer["K"]}, ${layer["C"]}, ${layer["OY"]}, ${layer["OX"]}, ${layer["FY"]}, ${layer["FX"]},
  ${layer["IY"]}, ${layer["IX"]}, ${layer["sy"]}, ${layer["sx"]}, ${layer["pad_top"]}, ${layer["pad_left"]},
  ${layer["zp_in"]}, ${layer["zp_out"]}, ${layer["low"]}, ${layer["high"]}, ${layer["rounding"]}, ${layer["w_cstride"]},
  ${f"{symbol}_add_params" if add_params is not None else "NULL"}, ${layer["w_block"]}, ${layer["act_layout"]}
};

% if resident:
/* the weights' place in the module's weight memory while a depth-first chain keeps them there
 * (network.c sets it for the chain): base NULL, each call loads them into its own buffer */
edgebyoc_resident_t ${symbol}_resident = {NULL, 0};

% endif
int ${symbol}(const int8_t* l2_in, const int8_t* l2_in2, const int8_t* l2_w,
              const int32_t* l2_bias, const int32_t* l2_mult, const int32_t* l2_shift,
              int8_t* l2_out, const edgebyoc_band_t* band) {
  edgebyoc_layer_t layer = ${symbol}_layer; /* the band's geometry when band != NULL */
  const edgebyoc_layer_t* L = &layer;
  static const int order[3] = {${", ".join(str(d) for d in (list(order) + [0, 0, 0])[:3])}};
  /* every loop for the buffers' fill keys: the output loops, then the tiled reduction loops
   * (3: C, 4: FY, 5: FX) */
  static const int loops[6] = {${", ".join(str(d) for d in (loop_codes + [0] * 6)[:6])}};
  int trips[3] = {${", ".join(str(t) for t in schedule["trips"])}};
  int trips_all[6] = {${", ".join(str(t) for t in schedule["trips"])}, ${r_trips["C"]}, ${r_trips["FY"]}, ${r_trips["FX"]}};
  static const int tiles[3] = {${", ".join(str(t) for t in schedule["tiles"])}};
  int in_row0 = 0, out_row0 = 0, in_ring = 0, in2_ring = 0, out_ring = 0, iterations = 1, d;
  const int in_channels = ${"0" if channelwise else "L->C"}; /* 0: each output channel reads its own */
  int8_t* l1_in[2] = {NULL, NULL};
  int8_t* l1_in2[2] = {NULL, NULL};
  int8_t* l1_w[2] = {NULL, NULL};
  int32_t* l1_bias[2] = {NULL, NULL};
  int32_t* l1_mult[2] = {NULL, NULL};
  int32_t* l1_shift[2] = {NULL, NULL};
  int8_t* l1_out[2] = {NULL, NULL};
  edgebyoc_box_t in_box[2] = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  edgebyoc_box_t w_box[2] = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  edgebyoc_box_t out_box[2] = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  int in_wait[2] = {-1, -1}, w_wait[2] = {-1, -1}, out_wait[2] = {-1, -1};
  int in_slot = 0, w_slot = 0, out_slot = 0, it, s, status = 0;
% if resident:
  const int w_resident = band != NULL && ${symbol}_resident.base != NULL;
% endif
% if partial:
  int32_t* l1_acc = NULL; /* the partial sums of one output tile */
  int w_c0[2] = {0, 0}, w_cs[2] = {${symbol}_layer.w_cstride, ${symbol}_layer.w_cstride}; /* channels in the weight buffer */
% endif
  (void)l2_in2; (void)l2_w; (void)l2_bias; (void)l2_mult; (void)l2_shift; (void)in_channels;
  (void)w_wait; (void)in_row0; (void)out_row0; (void)in_ring; (void)in2_ring; (void)out_ring;
  if (band != NULL) {
    if (edgebyoc_band_layer(&layer, band->y0, band->y1, &in_row0) != 0) return -3;
    out_row0 = band->y0;
    in_ring = band->in_ring; in2_ring = band->in2_ring; out_ring = band->out_ring;
    trips[1] = (layer.OY + tiles[1] - 1) / tiles[1];
    trips_all[1] = trips[1];
  }
  for (d = 0; d < ${depth_all}; ++d) iterations *= trips_all[loops[d]];

  /* platform setup */
  ${api["setup"]}();
  /* memory allocation */
  for (s = 0; s < ${slots("I")}; ++s) {
    l1_in[s] = (int8_t*)${api["l1_alloc"]}(${buffers["I_one"]});
% if two_inputs:
    l1_in2[s] = (int8_t*)${api["l1_alloc"]}(${buffers["I_one"]});
% endif
  }
% if has_weights:
% if resident:
  if (w_resident) { /* the chain's place in the weight memory: the weights, then the int32 arrays */
    l1_w[0] = ${symbol}_resident.base;
    l1_bias[0] = (int32_t*)(${symbol}_resident.base + ${resident_offset});
    l1_mult[0] = l1_bias[0] + ${buffers["W_k"]};
    l1_shift[0] = l1_mult[0] + ${buffers["W_k"]};
  } else
% endif
  for (s = 0; s < ${slots("W")}; ++s) {
    l1_w[s] = (int8_t*)${api["l1_alloc"]}(${buffers["W_data"]});
    l1_bias[s] = (int32_t*)${api["l1_alloc"]}(${buffers["W_k"]} * sizeof(int32_t));
    l1_mult[s] = (int32_t*)${api["l1_alloc"]}(${buffers["W_k"]} * sizeof(int32_t));
    l1_shift[s] = (int32_t*)${api["l1_alloc"]}(${buffers["W_k"]} * sizeof(int32_t));
  }
% endif
  for (s = 0; s < ${slots("O")}; ++s) l1_out[s] = (int8_t*)${api["l1_alloc"]}(${buffers["O"]});
% if partial:
  l1_acc = (int32_t*)${api["l1_alloc"]}(${buffers["acc"]} * sizeof(int32_t));
  if (l1_acc == NULL) status = -1;
% endif
  for (s = 0; s < 2; ++s) {
    if ((s < ${slots("I")} && (l1_in[s] == NULL${" || l1_in2[s] == NULL" if two_inputs else ""})) ||
% if has_weights:
        (s < ${slots("W")} && (l1_w[s] == NULL || l1_bias[s] == NULL || l1_mult[s] == NULL || l1_shift[s] == NULL)) ||
% endif
        (s < ${slots("O")} && l1_out[s] == NULL)) status = -1;
  }
  if (status != 0) goto cleanup;

<%def name="ring_in(l1, l2, ring, pitch, slot)">\
<%
    # rows outermost in L2 (NHWC, or NHCW planes cut in rows): a row's bytes follow each
    # other, row y at y * IX * pitch; only where a tile's first byte is and the runs differ
    if rows_outer:
        comment = "of planes cut in rows (NHCW): a run of ib.nx bytes per row of each channel"
        first, wrapped = f"((size_t)at * ({pitch}) + c0) * L->IX + ib.x0", \
            "(size_t)c0 * L->IX + ib.x0"
        runs = f"channels, ib.nx, channels * ib.nx, ib.nx, ({pitch}) * L->IX, L->IX"
    else:
        comment = "in up to two runs when the L2 buffer is a ring"
        first, wrapped = f"((size_t)at * L->IX + ib.x0) * ({pitch}) + c0", \
            f"(size_t)ib.x0 * ({pitch}) + c0"
        runs = f"ib.nx, channels, ib.nx * channels, channels, L->IX * ({pitch}), {pitch}"
%>\
{ /* rows in_row0 + ib.y0 on, ${comment} */
        int at, run;
        edgebyoc_ring_span(in_row0 + ib.y0, ib.ny, ${ring}, &at, &run);
        in_wait[${slot}] = ${api["dma_in_3d"]}(${l1}, ${l2} + ${first},
            run, ${runs});
        if (run < ib.ny) {
          ${api["dma_wait"]}(in_wait[${slot}]);
          in_wait[${slot}] = ${api["dma_in_3d"]}(${l1} + (size_t)run * ib.nx * channels, ${l2} + ${wrapped},
              ib.ny - run, ${runs});
        }
      }\
</%def>\
<%def name="ring_in_planar(l1, l2, ring, slot)">\
{ /* planes of `rows` rows in L2 (the whole layer's IY, or the ring's) */
        int at, run, rows = ${ring} > 0 ? ${ring} : ${symbol}_layer.IY;
        edgebyoc_ring_span(in_row0 + ib.y0, ib.ny, ${ring}, &at, &run);
        in_wait[${slot}] = ${api["dma_in_3d"]}(${l1}, ${l2} + ((size_t)c0 * rows + at) * L->IX + ib.x0,
            channels, run, ib.nx, ib.ny * ib.nx, ib.nx, rows * L->IX, L->IX);
        if (run < ib.ny) {
          ${api["dma_wait"]}(in_wait[${slot}]);
          in_wait[${slot}] = ${api["dma_in_3d"]}(${l1} + (size_t)run * ib.nx, ${l2} + (size_t)c0 * rows * L->IX + ib.x0,
              channels, ib.ny - run, ib.nx, ib.ny * ib.nx, ib.nx, rows * L->IX, L->IX);
        }
      }\
</%def>\
<%def name="load_input(j, slot)">\
    {
      edgebyoc_box_t ob = ${block(j, fill["I"])};
      edgebyoc_box_t ib;
      int channels = in_channels ? in_channels : ob.nk, c0 = in_channels ? 0 : ob.k0;
% if r_slice["I"]["FY"] or r_slice["I"]["FX"]:
      edgebyoc_layer_t taps = ${window(j, r_slice["I"])}; /* the input rows / columns of one filter tile */
% else:
      edgebyoc_layer_t taps = *L;
% endif
% if r_slice["I"]["C"]:
      c0 = ${r_index(j, "C")} * ${r_tiles["C"]}; channels = ${r_tiles["C"]}; /* one slice of C */
% endif
      edgebyoc_input_rows(&taps, ob, &ib.y0, &ib.ny, &ib.x0, &ib.nx);
      ib.k0 = c0; ib.nk = channels;
      in_box[${slot}] = ib;
% if planar and not rows_outer:
      /* channel planes: a run of ib.nx bytes per row of each channel */
      ${ring_in_planar("l1_in[" + slot + "]", "l2_in", "in_ring", slot)}
% if two_inputs:
      ${api["dma_wait"]}(in_wait[${slot}]);
      ${ring_in_planar("l1_in2[" + slot + "]", "l2_in2", "in2_ring", slot)}
% endif
% else:
      ${ring_in("l1_in[" + slot + "]", "l2_in", "in_ring", "in_channels ? in_channels : L->K", slot)}
% if two_inputs:
      ${api["dma_wait"]}(in_wait[${slot}]);
      ${ring_in("l1_in2[" + slot + "]", "l2_in2", "in2_ring", "L->K", slot)}
% endif
% endif
    }
</%def>\
<%def name="load_weights(j, slot)">\
% if has_weights:
    {
      edgebyoc_box_t wb = ${block(j, fill["W"])};
      w_box[${slot}] = wb;
      /* whole weight blocks (w_block channels interleaved): from the block of the first channel to the end of the block of the last */
      int w_first = edgebyoc_weight_block_start(L, wb.k0), w_end = edgebyoc_weight_block_start(L, wb.k0 + wb.nk - 1) + (L->w_block > 1 ? L->w_block : 1);
% if schedule["w_tile_major"]:
      /* one tile of the reduction loops: tile-major weights in L2 (tile_major_weights), the tile of blocks w_first..w_end in one run */
% if r_slice["W"]["C"]:
      w_c0[${slot}] = ${r_index(j, "C")} * ${r_tiles["C"]}; w_cs[${slot}] = ${r_tiles["C"]};
% endif
      w_wait[${slot}] = ${api["dma_in_3d"]}(l1_w[${slot}], l2_w + (size_t)${w_tile(j)} * ${schedule["w_tile_bytes"]} + (size_t)w_first * ${schedule["w_taps"] * schedule["w_channels"]},
          1, 1, (w_end - w_first) * ${schedule["w_taps"] * schedule["w_channels"]}, 0, 0, 0, 0);
% elif r_slice["W"]["C"]:
      /* one slice of C: per weight block and filter tap, the slice's channels (times the block's interleave) */
      int wblk = L->w_block > 1 ? L->w_block : 1, wc0 = ${r_index(j, "C")} * ${r_tiles["C"]};
      w_c0[${slot}] = wc0; w_cs[${slot}] = ${r_tiles["C"]};
      w_wait[${slot}] = ${api["dma_in_3d"]}(l1_w[${slot}], l2_w + (size_t)w_first * ${weight_bytes_per_k} + (size_t)wc0 * wblk,
          (w_end - w_first) / wblk, L->FY * L->FX, ${r_tiles["C"]} * wblk, L->FY * L->FX * ${r_tiles["C"]} * wblk, ${r_tiles["C"]} * wblk,
          wblk * ${weight_bytes_per_k}, L->w_cstride * wblk);
% else:
      w_wait[${slot}] = ${api["dma_in_3d"]}(l1_w[${slot}], l2_w + (size_t)w_first * ${weight_bytes_per_k}, 1, 1, (w_end - w_first) * ${weight_bytes_per_k}, 0, 0, 0, 0);
% endif
      ${api["dma_wait"]}(w_wait[${slot}]);
      w_wait[${slot}] = ${api["dma_in_3d"]}(l1_bias[${slot}], l2_bias + wb.k0, 1, 1, wb.nk * (int)sizeof(int32_t), 0, 0, 0, 0);
      ${api["dma_wait"]}(w_wait[${slot}]);
      w_wait[${slot}] = ${api["dma_in_3d"]}(l1_mult[${slot}], l2_mult + wb.k0, 1, 1, wb.nk * (int)sizeof(int32_t), 0, 0, 0, 0);
      ${api["dma_wait"]}(w_wait[${slot}]);
      w_wait[${slot}] = ${api["dma_in_3d"]}(l1_shift[${slot}], l2_shift + wb.k0, 1, 1, wb.nk * (int)sizeof(int32_t), 0, 0, 0, 0);
    }
% endif
</%def>\
  /* weights copy (whole layer when filled outside every loop) and the first tiles */
% if resident:
  if (!w_resident || !${symbol}_resident.loaded) { /* a resident copy: the chain's first call */
  ${load_weights("0", "0")}
  }
  if (w_resident) ${symbol}_resident.loaded = 1;
% else:
  ${load_weights("0", "0")}
% endif
  ${load_input("0", "0")}
  /* the tile loop nest, flattened: ${iterations} iterations for the whole layer */
  for (it = 0; it < iterations; ++it) {
    edgebyoc_box_t tile = ${block("it", depth_all)};
    int last = it + 1 == iterations;
    int new_in = !last && ${key("it + 1", fill["I"])} != ${key("it", fill["I"])};
    int new_w = !last && ${key("it + 1", fill["W"])} != ${key("it", fill["W"])};
    int out_done = last || ${key("it + 1", fill["O"])} != ${key("it", fill["O"])};
    int first_out = it == 0 || ${key("it - 1", fill["O"])} != ${key("it", fill["O"])};
    (void)new_w;
% if double:
    /* double buffering: start the next tiles' input copies before computing this one */
    if (new_in) {
      ${load_input("it + 1", "in_slot ^ 1")}
    }
    if (new_w) {
      ${load_weights("it + 1", "w_slot ^ 1")}
    }
% endif
    /* wait for this tile's inputs */
    ${api["dma_wait"]}(in_wait[in_slot]);
% if has_weights:
    ${api["dma_wait"]}(w_wait[w_slot]);
% endif
    if (first_out) {
      ${api["dma_wait"]}(out_wait[out_slot]); /* the buffer's previous copy out is done */
      out_box[out_slot] = ${block("it", fill["O"])};
    }
% if partial:
    /* compute kernel: this tile of the reduction loops into the tile's partial sums, requantized after the last */
    {
      int r_tile = it % ${r_total};
% if filter_tiled:
      edgebyoc_layer_t taps = ${window("it", {"FY": True, "FX": True})}; /* this filter tile as a layer */
% else:
      edgebyoc_layer_t taps = *L;
% endif
      if (${api["kernel_partial"]}(&taps, l1_in[in_slot], in_box[in_slot], l1_w[w_slot], w_c0[w_slot], w_cs[w_slot],
          l1_bias[w_slot], l1_mult[w_slot], l1_shift[w_slot], w_box[w_slot], l1_acc, ${r_index("it", "C")} * ${r_tiles["C"]}, ${r_tiles["C"]},
          r_tile == 0, r_tile == ${r_total - 1}, l1_out[out_slot], out_box[out_slot], tile) != 0) {
        status = -2;
        goto cleanup;
      }
    }
% else:
    /* compute kernel */
    if (${api["kernel"]}(L, l1_in[in_slot], in_box[in_slot], l1_in2[in_slot], l1_w[w_slot], l1_bias[w_slot],
        l1_mult[w_slot], l1_shift[w_slot], w_box[w_slot], l1_out[out_slot], out_box[out_slot], tile) != 0) {
      status = -2;
      goto cleanup;
    }
% endif
    ${api["compute_wait"]}();
    /* output tile copy */
    if (out_done) {
      edgebyoc_box_t ob = out_box[out_slot];
      int at, run;
% if planar and not rows_outer:
      int rows = out_ring > 0 ? out_ring : ${symbol}_layer.OY;
      edgebyoc_ring_span(out_row0 + ob.y0, ob.ny, out_ring, &at, &run);
      out_wait[out_slot] = ${api["dma_out_3d"]}(l2_out + ((size_t)ob.k0 * rows + at) * L->OX + ob.x0, l1_out[out_slot],
          ob.nk, run, ob.nx, rows * L->OX, L->OX, ob.ny * ob.nx, ob.nx);
      if (run < ob.ny) {
        ${api["dma_wait"]}(out_wait[out_slot]);
        out_wait[out_slot] = ${api["dma_out_3d"]}(l2_out + (size_t)ob.k0 * rows * L->OX + ob.x0, l1_out[out_slot] + (size_t)run * ob.nx,
            ob.nk, ob.ny - run, ob.nx, rows * L->OX, L->OX, ob.ny * ob.nx, ob.nx);
      }
% else:
<%
    # rows outermost (NHWC, NHCW): as ``ring_in``, only the offsets and runs differ
    if rows_outer:
        first, wrapped = "((size_t)at * L->K + ob.k0) * L->OX + ob.x0", "(size_t)ob.k0 * L->OX + ob.x0"
        runs = "ob.nk, ob.nx, L->K * L->OX, L->OX, ob.nk * ob.nx, ob.nx"
    else:
        first, wrapped = "((size_t)at * L->OX + ob.x0) * L->K + ob.k0", "(size_t)ob.x0 * L->K + ob.k0"
        runs = "ob.nx, ob.nk, L->OX * L->K, L->K, ob.nx * ob.nk, ob.nk"
%>\
      edgebyoc_ring_span(out_row0 + ob.y0, ob.ny, out_ring, &at, &run);
      out_wait[out_slot] = ${api["dma_out_3d"]}(l2_out + ${first}, l1_out[out_slot],
          run, ${runs});
      if (run < ob.ny) {
        ${api["dma_wait"]}(out_wait[out_slot]);
        out_wait[out_slot] = ${api["dma_out_3d"]}(l2_out + ${wrapped}, l1_out[out_slot] + (size_t)run * ob.nx * ob.nk,
            ob.ny - run, ${runs});
      }
% endif
% if double and fill["O"] > 0:
      out_slot ^= 1;
% else:
      ${api["dma_wait"]}(out_wait[out_slot]);
% endif
    }
% if double:
    if (new_in) in_slot ^= ${1 if slots("I") == 2 else 0};
    if (new_w) w_slot ^= ${1 if slots("W") == 2 else 0};
% else:
    if (new_in) {
      ${load_input("it + 1", "in_slot")}
    }
    if (new_w) {
      ${load_weights("it + 1", "w_slot")}
    }
% endif
  }
  for (s = 0; s < 2; ++s) ${api["dma_wait"]}(out_wait[s]);

cleanup:
% if resident:
  if (w_resident) { /* the weight memory's, not allocated here */
    l1_w[0] = NULL; l1_bias[0] = NULL; l1_mult[0] = NULL; l1_shift[0] = NULL;
  }
% endif
  /* free memory (reverse order of allocation) */
% if partial:
  if (l1_acc) ${api["l1_free"]}(l1_acc);
% endif
  for (s = 1; s >= 0; --s) if (l1_out[s]) ${api["l1_free"]}(l1_out[s]);
  for (s = 1; s >= 0; --s) {
    if (l1_shift[s]) ${api["l1_free"]}(l1_shift[s]);
    if (l1_mult[s]) ${api["l1_free"]}(l1_mult[s]);
    if (l1_bias[s]) ${api["l1_free"]}(l1_bias[s]);
    if (l1_w[s]) ${api["l1_free"]}(l1_w[s]);
  }
  for (s = 1; s >= 0; --s) {
    if (l1_in2[s]) ${api["l1_free"]}(l1_in2[s]);
    if (l1_in[s]) ${api["l1_free"]}(l1_in[s]);
  }
  /* platform shutdown */
  ${api["shutdown"]}();
  return status;
}
