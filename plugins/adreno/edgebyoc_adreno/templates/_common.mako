## Shared pieces of the adreno kernels: precision, the sampler, the warp-shaped thread mapping
## and the bias / activation epilogue.
<%def name="header(fp16, layouts)">\
% if fp16:
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half real;
typedef half4 real4;
#define READ_TEXEL read_imageh
% else:
typedef float real;
typedef float4 real4;
#define READ_TEXEL read_imagef
% endif
__constant sampler_t SAMPLER = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
% for i, layout in enumerate(layouts):
${layout.c_macro(f"TEX{i}")}
% endfor
</%def>
## The thread's position in the (x, y) grid: threads are numbered warp by warp, each warp
## covers a WX x WY block of the work group's GX x GY threads.
<%def name="thread_xy(cfg, warp_size)">\
    const int local_id = get_local_id(0) + get_local_id(1) * ${cfg.group[0]};
    const int warp = local_id / ${warp_size}, lane = local_id % ${warp_size};
    const int tx = get_group_id(0) * ${cfg.group[0]} + (warp % ${cfg.group[0] // cfg.warp[0]}) * ${cfg.warp[0]} + lane % ${cfg.warp[0]};
    const int ty = get_group_id(1) * ${cfg.group[1]} + (warp / ${cfg.group[0] // cfg.warp[0]}) * ${cfg.warp[1]} + lane / ${cfg.warp[0]};
</%def>
## value -> value with the bias of output channel `index` and the activation
<%def name="epilogue(ep, value, index)">\
% if ep.bias:
            ${value} += bias[${index}];
% endif
% if ep.activation == "relu":
            ${value} = fmax(${value}, (real)0);
% elif ep.activation == "clip":
            ${value} = fmin(fmax(${value}, (real)${repr(float(ep.low))}f), (real)${repr(float(ep.high))}f);
% endif
</%def>
