p = "src/fusedmlp/ops/lora.py"
s = open(p).read()
old = '''        if needs_lb:
            later(lambda: accumulate("b", dpre.t(), xs[rows]))
        if needs_a or needs_xl or d_xa_rows is not None or tail:'''
assert old in s
s = s.replace(old, '''        if needs_a or needs_xl or d_xa_rows is not None or tail:''')
old = '''            if tail:
                chunk["d_xa"] = d_xa
'''
assert old in s
s = s.replace(old, old + '''        if needs_lb:
            later(lambda: accumulate("b", dpre.t(), xs[rows]))
''')
open(p, "w").write(s)
print("swapped: dA before dB")
