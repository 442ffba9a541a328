"""The short-script baseline mnist-cnn is measured against: a keras-io-style MNIST convnet in one file.

    .venv/bin/python ci/bench/mnist_baseline.py --data-dir DIR [--json OUT]

Written from the description of keras-io's "Simple MNIST convnet" (examples/vision/mnist_convnet.py),
with its model and settings unchanged: Conv 32 (3x3, relu), max-pool, Conv 64 (3x3, relu), max-pool,
flatten, dropout 0.5, dense 10 (softmax); categorical cross-entropy on one-hot labels; Adam at Keras's
default rate; batch 128; 15 epochs of `model.fit` with `validation_split=0.1`; then `model.evaluate`
on the 10,000 test digits. DIR holds the Keras mnist.npz. ci/bench/time_to_accuracy.py times it as a
whole process, start-up included, beside the recipe.
"""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="folder holding the Keras mnist.npz")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--json", help="write the test accuracy and the fit's history here")
    args = parser.parse_args()

    import keras
    import numpy as np

    with np.load(os.path.join(args.data_dir, "mnist.npz")) as data:
        x_train, y_train, x_test, y_test = (data[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    x_train = np.expand_dims(x_train.astype("float32") / 255, -1)
    x_test = np.expand_dims(x_test.astype("float32") / 255, -1)
    y_train, y_test = keras.utils.to_categorical(y_train, 10), keras.utils.to_categorical(y_test, 10)

    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    started = time.perf_counter()
    history = model.fit(x_train, y_train, batch_size=128, epochs=args.epochs, validation_split=0.1, verbose=2)
    fit_seconds = time.perf_counter() - started
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"test: loss {loss:.4f}  accuracy {accuracy:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"test_accuracy": accuracy, "test_loss": loss, "fit_seconds": round(fit_seconds, 2),
                       "epochs": args.epochs, "history": history.history}, handle, indent=2)


if __name__ == "__main__":
    main()
