<%namespace name="common" file="_common.mako"/>\
## SoftMax / LayerNorm over the last axis: thread x handles rows x*TR .. +TR-1, three passes
## over each row's texels (max / sum / write, or mean / variance / write), rows interleaved.
<%
    TR = cfg.tile[0]
    N4 = c4(k.cols)
    rem = k.cols - 4 * (N4 - 1)   # valid lanes of the last texel
    (inp,) = layouts
    softmax = k.kind == "softmax"
%>\
${common.header(fp16, layouts)}
<%def name="masked(value, fill)">\
(c4 == ${N4 - 1} ? (real4)(${value}.x, ${rem > 1 and f"{value}.y" or fill}, ${rem > 2 and f"{value}.z" or fill}, ${rem > 3 and f"{value}.w" or fill}) : ${value})\
</%def>
__kernel __attribute__((reqd_work_group_size(${cfg.group[0]}, 1, 1)))
void ${name}(__read_only image2d_t input,
% if not softmax:
             __global const real* gamma, __global const real* beta,
% endif
             __global real* output) {
    const int r0 = get_global_id(0) * ${TR};
    if (r0 >= ${k.rows}) return;
% for t in range(TR):
    const int row_${t} = min(r0 + ${t}, ${k.rows - 1});
    real first_${t} = ${"-INFINITY" if softmax else "0"}, second_${t} = 0;
% endfor
    for (int c4 = 0; c4 < ${N4}; ++c4) {
% for t in range(TR):
        const real4 v_${t} = READ_TEXEL(input, SAMPLER, TEX0(${lane_call(inp, f"row_{t}")}, c4));
%   if softmax:
        const real4 m_${t} = ${masked(f"v_{t}", "-INFINITY")};
        first_${t} = fmax(first_${t}, fmax(fmax(m_${t}.x, m_${t}.y), fmax(m_${t}.z, m_${t}.w)));
%   else:
        const real4 m_${t} = ${masked(f"v_{t}", "0")};
        first_${t} += m_${t}.x + m_${t}.y + m_${t}.z + m_${t}.w;
%   endif
% endfor
    }
% if not softmax:
%   for t in range(TR):
    first_${t} /= ${k.cols};
%   endfor
% endif
    for (int c4 = 0; c4 < ${N4}; ++c4) {
% for t in range(TR):
        const real4 v_${t} = READ_TEXEL(input, SAMPLER, TEX0(${lane_call(inp, f"row_{t}")}, c4));
%   if softmax:
        const real4 e_${t} = ${masked(f"exp(v_{t} - first_{t})", "0")};
        second_${t} += e_${t}.x + e_${t}.y + e_${t}.z + e_${t}.w;
%   else:
        const real4 d_${t} = ${masked(f"(v_{t} - first_{t})", "0")};
        second_${t} += dot(d_${t}, d_${t});
%   endif
% endfor
    }
% for t in range(TR):
    const real scale_${t} = ${"(real)1 / second_" + str(t) if softmax else f"rsqrt(second_{t} / {k.cols} + (real){k.epsilon!r}f)"};
% endfor
    for (int c4 = 0; c4 < ${N4}; ++c4) {
% for t in range(TR):
        if (r0 + ${t} < ${k.rows}) {
            const real4 v_${t} = READ_TEXEL(input, SAMPLER, TEX0(${lane_call(inp, f"row_{t}")}, c4));
%   if softmax:
            const real4 o_${t} = exp(v_${t} - first_${t}) * scale_${t};
%   else:
            const real4 o_${t} = (v_${t} - first_${t}) * scale_${t};
%   endif
            const real values_${t}[4] = {o_${t}.x, o_${t}.y, o_${t}.z, o_${t}.w};
            for (int j = 0; j < 4; ++j) {
                const int column = c4 * 4 + j;
                if (column < ${k.cols}) {
%   if softmax:
                    output[row_${t} * ${k.cols} + column] = values_${t}[j];
%   else:
                    output[row_${t} * ${k.cols} + column] = values_${t}[j] * gamma[column] + beta[column];
%   endif
                }
            }
        }
% endfor
    }
}
