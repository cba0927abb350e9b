// Open an .om file with Netron's own om.js and print what Netron sees, as JSON.
//
// usage: node harness.mjs <netron package dir> <file.om> [--sizes | --numbers]
//
// Only the few host/context methods om.ModelFactory.match/open call are stubbed:
// context.stream (base.BinaryStream), context.set, context.metadata, context.require.
// Output: {format, graphs: [{name, nodes: [{name, type, inputs, outputs, attributes,
// chain, controlDependencies}]}]}; tensor bytes Netron resolved are hex strings.  With
// `--numbers`, each initializer also has `numbers`: the values Netron's own decoder
// (base.Tensor) shows, flattened -- what a user sees, packed types (int4) included.
import * as fs from 'fs';
import * as path from 'path';
import { pathToFileURL } from 'url';

const [netronDir, file, mode] = process.argv.slice(2);
// With a third argument `--sizes`, tensor bytes are reported as their length (large models).
const sizesOnly = mode === '--sizes';
const withNumbers = mode === '--numbers';
if (!netronDir || !file) {
    process.stderr.write('usage: node harness.mjs <netron dir> <file.om>\n');
    process.exit(2);
}
const load = (name) => import(pathToFileURL(path.join(netronDir, name)).href);

class Metadata {  // the part of Netron's view.Metadata that om.js uses
    constructor(types) {
        this._types = new Map();
        for (const type of types) {
            this._types.set(type.name, type);
        }
    }
    type(name) {
        if (!this._types.has(name)) {
            this._types.set(name, { name: name.toString() });
        }
        return this._types.get(name);
    }
}

const hex = (bytes) => sizesOnly ? `${bytes.byteLength} bytes` :
    Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');

const tensorType = (type) => type ? {
    dataType: type.dataType,
    shape: type.shape ? type.shape.dimensions.map((d) => Number(d)) : null,
    layout: type.denotation || null
} : null;

let base = null;

// The numbers Netron's own tensor decoder shows for an initializer, flattened (null when it
// cannot decode the type).
const decoded = (tensor) => {
    try {
        const flat = (x) => Array.isArray(x) ? x.flatMap(flat) : [typeof x === 'bigint' ? Number(x) : x];
        return flat(new base.Tensor(tensor).value);
    } catch {
        return null;
    }
};

const value = (v) => ({
    name: v.name,
    type: tensorType(v.type),
    initializer: v.initializer ? {
        type: tensorType(v.initializer.type),
        data: v.initializer.values ? hex(v.initializer.values) : null,
        ...(withNumbers ? { numbers: decoded(v.initializer) } : {})
    } : null
});

const plain = (x) => {
    if (typeof x === 'bigint') {
        return Number(x);
    }
    if (x instanceof Uint8Array) {
        return hex(x);
    }
    if (Array.isArray(x)) {
        return x.map(plain);
    }
    if (x && typeof x === 'object') {
        if (x.constructor && x.constructor.name === 'Tensor') {
            return { tensor: tensorType(x.type), data: x.values ? hex(x.values) : null };
        }
        return String(x);
    }
    return x;
};

const node = (n) => ({
    name: n.name,
    type: n.type.name,
    inputs: n.inputs.map((a) => ({ name: a.name, values: a.value.map(value) })),
    outputs: n.outputs.map((a) => ({ name: a.name, values: a.value.map(value) })),
    attributes: n.attributes.map((a) => ({ name: a.name, type: a.type, value: plain(a.value) })),
    chain: n.chain.map((c) => c.type.name),
    controlDependencies: n.controlDependencies.map((v) => v.name)
});

const main = async () => {
    base = await load('base.js');
    const om = await load('om.js');
    const buffer = new Uint8Array(fs.readFileSync(file));
    const context = {
        identifier: path.basename(file),
        stream: new base.BinaryStream(buffer),
        set(type, value) {
            this.type = type;
            this.value = value;
            return type;
        },
        async metadata(name) {
            return new Metadata(JSON.parse(fs.readFileSync(path.join(netronDir, name), 'utf-8')));
        },
        async require(id) {
            return load(`${id}.js`);
        }
    };
    const factory = new om.ModelFactory();
    const match = await factory.match(context);
    if (!match) {
        throw new Error('Netron does not recognise the file as an .om model.');
    }
    const model = await factory.open(context);
    const result = {
        format: model.format,
        graphs: model.modules.map((g) => ({ name: g.name, nodes: g.nodes.map(node) }))
    };
    process.stdout.write(`${JSON.stringify(result, null, 1)}\n`);
};

main().catch((error) => {
    process.stderr.write(`${error && error.name ? `${error.name}: ` : ''}${error && error.message ? error.message : error}\n`);
    process.exit(1);
});
